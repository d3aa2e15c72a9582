//! The table's programs as the monitor reads their arguments: `find`'s
//! folders and what it runs, subcommands, and file arguments (with
//! recursive reads).

use super::text::*;
use super::{Cwd, Expander, Part, Word};
use crate::normalize::ResourceInput;
use crate::programs::Effect;

impl Expander<'_> {
    /// `find START… EXPRESSION`: the starting folders are read, and each
    /// `-exec`/`-execdir`/`-ok`/`-okdir` command is a part whose `{}` is
    /// the pattern of files found; `-delete` deletes them.
    pub(super) fn find(&mut self, args: &[Word], cwd: &mut Cwd, depth: usize, index: usize) {
        // `-H`, `-L`, `-P`, `-D opts`, `-O3` come before the starting folders.
        let mut at = 0;
        while let Some(arg) = args.get(at) {
            match arg.text.as_str() {
                "-H" | "-L" | "-P" => at += 1,
                "-D" => at += 2,
                text if text.starts_with("-O") => at += 1,
                _ => break,
            }
        }
        let args = args.get(at.min(args.len())..).unwrap_or_default();
        let starts: Vec<&Word> =
            args.iter().take_while(|w| !w.text.starts_with('-') && w.text != "(" && w.text != "!").collect();
        let default_start = Word::literal(".");
        let starts = if starts.is_empty() { vec![&default_start] } else { starts };
        let name = args
            .windows(2)
            .find(|w| w.first().is_some_and(|o| o.text == "-name" || o.text == "-iname"))
            .and_then(|w| w.get(1))
            .map_or("*".to_owned(), |w| w.text.clone());
        for start in &starts {
            self.file(Effect::Read, start, cwd, Some(index));
        }
        let found: Vec<Word> = starts
            .iter()
            .map(|start| Word {
                text: format!("{}/**/{name}", start.text.trim_end_matches('/')),
                dynamic: start.dynamic,
                glob: true,
            })
            .collect();
        // `-fprint FILE` and its kin write a file.
        for pair in args.windows(2) {
            if let [option, file] = pair
                && ["-fprint", "-fprint0", "-fprintf", "-fls"].contains(&option.text.as_str())
            {
                self.file(Effect::Write, file, cwd, Some(index));
            }
        }
        let mut rest = args;
        while let Some(at) =
            rest.iter().position(|w| ["-exec", "-execdir", "-ok", "-okdir", "-delete"].contains(&w.text.as_str()))
        {
            let Some(option) = rest.get(at) else { break };
            if option.text == "-delete" {
                for file in &found {
                    self.file(Effect::Delete, file, cwd, Some(index));
                }
                rest = rest.get(at + 1..).unwrap_or_default();
                continue;
            }
            let body = rest.get(at + 1..).unwrap_or_default();
            let end = body.iter().position(|w| w.text == ";" || w.text == "+").unwrap_or(body.len());
            let command = body.get(..end).unwrap_or_default();
            for file in &found {
                let argv: Vec<Word> =
                    command.iter().map(|w| if w.text.contains("{}") { file.clone() } else { w.clone() }).collect();
                let mut inner = cwd.clone();
                self.command(&argv, &mut inner, depth + 1, false, false);
            }
            rest = body.get(end + 1..).unwrap_or_default();
        }
    }

    /// A program with subcommands: an unknown one (an alias, a plugin) is
    /// opaque; long options given as prefixes are shown whole.
    pub(super) fn subcommand(&mut self, table: &crate::programs::Subcommands, args: &[Word], index: usize) {
        let mut at = 0;
        while let Some(arg) = args.get(at) {
            if !arg.text.starts_with('-') {
                break;
            }
            at += if table.options_with_value.contains(&arg.text) { 2 } else { 1 };
        }
        let Some(sub) = args.get(at) else { return };
        if sub.dynamic || !table.known.contains(&sub.text) {
            self.mark_opaque(index);
            return;
        }
        let long = table.long_options.get(&sub.text);
        let flags = table.short_flags.get(&sub.text);
        let with_value = table.options_with_value_of.get(&sub.text);
        let defaults = table.default_operands.get(&sub.text);
        let exact = table.exact.contains(&sub.text);
        if long.is_none() && flags.is_none() && defaults.is_none() && !exact {
            return;
        }
        // The subcommand's arguments as the program reads them: long
        // options whole, short clusters one by one, the operands it assumes.
        let mut shown: Vec<String> = Vec::new();
        let mut operands = 0;
        let mut opaque = false;
        let mut rest = args.get(at + 1..).unwrap_or_default().iter();
        let mut options_done = false;
        while let Some(arg) = rest.next() {
            opaque |= exact && arg.dynamic;
            let text = arg.text.as_str();
            if options_done || !text.starts_with('-') || text == "-" {
                operands += 1;
                shown.push(text.to_owned());
                continue;
            }
            if text == "--" {
                options_done = true;
                shown.push(text.to_owned());
                continue;
            }
            if let Some(long) = long.filter(|_| text.starts_with("--")) {
                let (option, value) = match text.split_once('=') {
                    Some((option, value)) => (option, Some(value)),
                    None => (text, None),
                };
                let mut matches = long.iter().filter(|full| full.starts_with(option));
                let full = match (long.contains(option), matches.next(), matches.next()) {
                    (true, _, _) => option.to_owned(),
                    (false, Some(full), None) => full.clone(),
                    _ => option.to_owned(),
                };
                if value.is_none() && with_value.is_some_and(|w| w.contains(&full)) {
                    let value = rest.next();
                    opaque |= exact && value.is_some_and(|v| v.dynamic);
                    shown.push(full);
                    shown.extend(value.map(|v| v.text.clone()));
                    continue;
                }
                shown.push(match value {
                    Some(value) => format!("{full}={value}"),
                    None => full,
                });
                continue;
            }
            if with_value.is_some_and(|w| w.contains(text)) {
                shown.push(text.to_owned());
                shown.extend(rest.next().map(|v| v.text.clone()));
                continue;
            }
            match flags {
                Some(letters) if text.len() > 2 && text.chars().skip(1).all(|c| letters.contains(c)) => {
                    shown.extend(text.chars().skip(1).map(|c| format!("-{c}")));
                }
                _ => shown.push(text.to_owned()),
            }
        }
        let chosen = table.no_defaults_with.get(&sub.text).is_some_and(|options| {
            shown.iter().any(|arg| options.contains(arg.split_once('=').map_or(arg.as_str(), |(o, _)| o)))
        });
        if let Some(defaults) = defaults.filter(|_| !chosen) {
            shown.extend(defaults.iter().skip(operands).cloned());
        }
        if opaque {
            self.mark_opaque(index);
        }
        let Some(Part { resource: ResourceInput::Command { argv, .. }, .. }) = self.parts.get_mut(index) else {
            return;
        };
        argv.truncate(at + 2);
        argv.extend(shown);
    }

    /// The files a known program reads, writes or deletes.
    pub(super) fn file_args(&mut self, table: &crate::programs::FileArgs, args: &[Word], cwd: &Cwd, index: usize) {
        let mut operands = Vec::new();
        let mut in_place = false;
        let mut recursive = table.always_recursive;
        let mut skip_dropped = false;
        let mut iter = args.iter();
        let mut options_done = false;
        while let Some(arg) = iter.next() {
            let text = arg.text.as_str();
            if options_done || !text.starts_with('-') || text == "-" {
                if let Some((name, value)) = text.split_once('=')
                    && let Some(effect) = table.assignment_files.get(name)
                {
                    let file = Word { text: value.to_owned(), ..arg.clone() };
                    self.file(*effect, &file, cwd, Some(index));
                    continue;
                }
                operands.push(arg);
                continue;
            }
            if text == "--" {
                options_done = true;
                continue;
            }
            if arg.dynamic {
                // An option the monitor cannot read could name any file.
                self.mark_opaque(index);
                continue;
            }
            // Options that name a file or stand for the skipped operands take
            // a value too.
            let takes_value = |option: &str| {
                table.options_with_value.contains(option)
                    || table.option_files.contains_key(option)
                    || table.skip_unless.contains(option)
            };
            let short = text.get(..2).filter(|_| !text.starts_with("--"));
            let (option, value) = if let Some((option, value)) = text.split_once('=').filter(|_| text.starts_with("--"))
            {
                (option.to_owned(), Some(Word { text: value.to_owned(), ..arg.clone() }))
            } else if takes_value(text) {
                (text.to_owned(), iter.next().cloned())
            } else if let Some(short) = short.filter(|s| text.len() > 2 && takes_value(s)) {
                (short.to_owned(), Some(Word { text: text.get(2..).unwrap_or_default().to_owned(), ..arg.clone() }))
            } else {
                (text.to_owned(), None)
            };
            if table.in_place.contains(&option) || table.in_place.iter().any(|o| option.starts_with(o.as_str())) {
                in_place = true;
            }
            recursive |= table.recursive.contains(&option)
                || value.as_ref().is_some_and(|v| table.recursive_when.get(&option).is_some_and(|r| *r == v.text));
            if !text.starts_with("--") {
                // A cluster (`-rn`): each letter up to one that takes a value.
                for letter in text.chars().skip(1) {
                    let short = format!("-{letter}");
                    recursive |= table.recursive.contains(&short);
                    if takes_value(&short) {
                        break;
                    }
                }
            }
            if table.skip_unless.contains(&option) {
                skip_dropped = true;
            }
            if let (Some(effect), Some(value)) = (table.option_files.get(&option), value) {
                self.file(*effect, &value, cwd, Some(index));
            }
        }
        let skip = if skip_dropped { 0 } else { table.skip };
        let operands = operands.get(skip.min(operands.len())..).unwrap_or_default();
        let count = operands.len();
        let mut read_any = false;
        for (i, operand) in operands.iter().enumerate() {
            for (spec, effect) in
                [(table.reads, Effect::Read), (table.writes, Effect::Write), (table.deletes, Effect::Delete)]
            {
                if spec.is_some_and(|s| s.covers(i, count)) {
                    self.file(effect, operand, cwd, Some(index));
                    if in_place && effect == Effect::Read {
                        self.file(Effect::Write, operand, cwd, Some(index));
                    }
                    if recursive && effect == Effect::Read {
                        read_any = true;
                        self.file(Effect::Read, &below(operand), cwd, Some(index));
                    }
                }
            }
        }
        // `grep -r x`, `rg x`: the folder it is run in.
        if recursive
            && !read_any
            && let Some(default) = &table.recursive_default
        {
            let folder = Word::literal(default);
            self.file(Effect::Read, &folder, cwd, Some(index));
            self.file(Effect::Read, &below(&folder), cwd, Some(index));
        }
    }
}
