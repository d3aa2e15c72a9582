//! What the words of a command mean before they are walked: the parser's
//! options and the bounds it is kept within, ANSI-C quoting, globs,
//! assignments, options and their values, devices.

use super::{Cwd, Word};
use crate::programs::Effect;

pub(super) fn parser_options() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions::default()
}

/// After a branch that may or may not run: every folder either left.
pub(super) fn merge(a: &Cwd, b: &Cwd) -> Cwd {
    if a == b {
        return a.clone();
    }
    match (a.candidates(), b.candidates()) {
        (Some(a), Some(b)) => Cwd::from_all(a.into_iter().chain(b).map(str::to_owned).collect()),
        _ => Cwd::Unknown,
    }
}

/// The deepest nesting of brackets, quotes aside (an over-count is safe).
/// Control characters other than tab and newline (a carriage return, a
/// form feed …) are not handed to the parser (opaque): scripts that people
/// and agents write hold none, and brush-parser 0.4 reads some of them as
/// blanks where bash does not (see [`empty_here_tag`]).
pub(super) fn unusual_controls(text: &str) -> bool {
    text.chars().any(|c| c.is_ascii_control() && c != '\t' && c != '\n')
}

/// How deep expansions nest, counting an opener (`${`, `$(`, `$[`, a
/// backquote that opens) and any closing bracket; an over-count only makes
/// a script opaque.
pub(super) fn expansion_nesting(text: &str) -> usize {
    let (mut depth, mut deepest, mut backquotes) = (0usize, 0usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' if matches!(chars.peek(), Some('{' | '(' | '[')) => {
                chars.next();
                depth += 1;
                deepest = deepest.max(depth + backquotes);
            }
            '`' => {
                // Backquotes alternate: an odd one opens.
                backquotes = (backquotes + 1) % 2;
                deepest = deepest.max(depth + backquotes);
            }
            '}' | ')' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// How deep brackets nest (opaque beyond `MAX_NESTING`).
pub(super) fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '{' | '[' | '`' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `{a,b}` or `{1..3}` outside quotes: one word becomes several.
pub(super) fn has_brace_expansion(text: &str) -> bool {
    let mut quote = None;
    let mut open = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (_, '\\') if quote != Some('\'') => escaped = true,
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '{') => open = Some(i),
            (None, '}') => {
                if let Some(start) = open
                    && let Some(inside) = text.get(start + 1..i)
                    && (inside.contains(',') || inside.contains(".."))
                {
                    return true;
                }
                open = None;
            }
            _ => {}
        }
    }
    false
}

/// The value of `$'…'` text (bash's ANSI-C quoting); `None` for an escape
/// the monitor does not read (`\c`, a NUL).
pub(super) fn decode_ansi_c(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        let simple = match escaped {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(escaped),
            _ => None,
        };
        if let Some(simple) = simple {
            out.push(simple);
            continue;
        }
        let (radix, max) = match escaped {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => (8, 2),
            _ => return None,
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(escaped);
        }
        while digits.len() < max + usize::from(radix == 8)
            && let Some(d) = chars.peek().copied().filter(|d| d.is_digit(radix))
        {
            digits.push(d);
            chars.next();
        }
        let value = u32::from_str_radix(&digits, radix).ok()?;
        let decoded = char::from_u32(value).filter(|c| *c != '\0')?;
        out.push(decoded);
    }
    Some(out)
}

/// Unquoted text that is a pattern: `*`, `?`, or a bracket expression.
pub(super) fn is_glob(text: &str) -> bool {
    text.contains(['*', '?'])
        || text.find('[').is_some_and(|open| text.get(open + 1..).is_some_and(|r| r.contains(']')))
}

pub(super) fn is_assignment(text: &str) -> bool {
    match text.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Words after a program's options (`--` ends them), skipping the values
/// of options that take one.
pub(super) fn skip_options<'w>(args: &'w [Word], with_value: &crate::programs::Options) -> &'w [Word] {
    let mut at = 0;
    while let Some(arg) = args.get(at) {
        let text = arg.text.as_str();
        if text == "--" {
            return args.get(at + 1..).unwrap_or_default();
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        at += if with_value.contains(text) { 2 } else { 1 };
    }
    args.get(at.min(args.len())..).unwrap_or_default()
}

/// The options before a wrapper's command that take a value, with their
/// values (`-u root`, `-uroot`, `--user=root`).
pub(super) fn option_values<'w>(args: &'w [Word], with_value: &'w crate::programs::Options) -> Vec<(&'w str, Word)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(arg) = args.get(at) {
        let text = arg.text.as_str();
        if text == "--" || !text.starts_with('-') || text == "-" {
            break;
        }
        if with_value.contains(text) {
            if let Some(value) = args.get(at + 1) {
                out.push((text, value.clone()));
            }
            at += 2;
            continue;
        }
        if let Some((option, value)) = crate::programs::attached(with_value, text)
            && let Some(known) = with_value.get(option)
        {
            out.push((known.as_str(), Word { text: value.to_owned(), ..arg.clone() }));
        }
        at += 1;
    }
    out
}

/// Everything below a folder a recursive read reads: `DIR/**/*`, a pattern
/// (what `find DIR` finds).
pub(super) fn below(folder: &Word) -> Word {
    Word { text: format!("{}/**/*", folder.text.trim_end_matches('/')), dynamic: folder.dynamic, glob: true }
}

/// Descriptors and devices a redirection may name without touching a file.
pub(super) fn is_device(path: &str) -> bool {
    matches!(path, "/dev/null" | "/dev/stdin" | "/dev/stdout" | "/dev/stderr" | "/dev/tty" | "/dev/zero")
        || path.strip_prefix("/dev/fd/").is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
}

pub(super) fn effect_word(effect: Effect) -> &'static str {
    match effect {
        Effect::Read => "<",
        Effect::Write => ">",
        Effect::Delete => "rm",
    }
}
