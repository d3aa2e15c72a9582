//! A policy folder's files as text: read in one go, hashed into the
//! set's version, given back whole (`Admin.GetPolicyFiles`) and written
//! into a folder again (`wardenctl policy diff --running`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{ENTITIES_FILE, INVARIANTS_DIR, LoadError, SCHEMA_FILE, SourceDiagnostic};
use crate::programs::PROGRAMS_FILE;

/// The text of a policy folder's files, read in one go so that a snapshot is
/// built from one consistent view.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyFiles {
    /// `schema.cedarschema`.
    pub(crate) schema: String,
    /// `*.cedar` by file name, sorted.
    pub(crate) policies: BTreeMap<String, String>,
    /// `entities.json`, when present.
    pub(crate) entities: Option<String>,
    /// `programs.toml`, when present.
    pub(crate) programs: Option<String>,
    /// `invariants/*.cedar` by name (`invariants/x.cedar`), sorted.
    pub(crate) invariants: BTreeMap<String, String>,
}

impl PolicyFiles {
    /// Reads `dir`: the schema (required), every `*.cedar` directly in it, and
    /// `entities.json` if present.
    pub(crate) fn read(dir: &Path) -> Result<Self, LoadError> {
        let folder = dir.display().to_string();
        let read = |path: PathBuf, name: &str| {
            std::fs::read_to_string(&path).map_err(|e| {
                LoadError::one(SourceDiagnostic::whole_file(name, format!("cannot read {}: {e}", path.display())))
            })
        };
        let entries = std::fs::read_dir(dir).map_err(|e| {
            LoadError::one(SourceDiagnostic::whole_file(&folder, format!("cannot read the policy folder: {e}")))
        })?;
        let mut policies = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| LoadError::one(SourceDiagnostic::whole_file(&folder, e.to_string())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".cedar") && entry.path().is_file() {
                let text = read(entry.path(), &name)?;
                policies.insert(name, text);
            }
        }
        let schema_path = dir.join(SCHEMA_FILE);
        if !schema_path.is_file() {
            return Err(LoadError::one(SourceDiagnostic::whole_file(
                SCHEMA_FILE,
                format!("the policy folder {folder} has no {SCHEMA_FILE}"),
            )));
        }
        let schema = read(schema_path, SCHEMA_FILE)?;
        let entities_path = dir.join(ENTITIES_FILE);
        let entities = if entities_path.is_file() { Some(read(entities_path, ENTITIES_FILE)?) } else { None };
        let programs_path = dir.join(PROGRAMS_FILE);
        let programs = if programs_path.is_file() { Some(read(programs_path, PROGRAMS_FILE)?) } else { None };
        let mut invariants = BTreeMap::new();
        let invariants_dir = dir.join(INVARIANTS_DIR);
        if invariants_dir.is_dir() {
            let entries = std::fs::read_dir(&invariants_dir).map_err(|e| {
                LoadError::one(SourceDiagnostic::whole_file(INVARIANTS_DIR, format!("cannot read it: {e}")))
            })?;
            for entry in entries {
                let entry =
                    entry.map_err(|e| LoadError::one(SourceDiagnostic::whole_file(INVARIANTS_DIR, e.to_string())))?;
                let name = format!("{INVARIANTS_DIR}/{}", entry.file_name().to_string_lossy());
                if name.ends_with(".cedar") && entry.path().is_file() {
                    let text = read(entry.path(), &name)?;
                    invariants.insert(name, text);
                }
            }
        }
        Ok(Self { schema, policies, entities, programs, invariants })
    }

    /// Every file's name (relative to the folder) and text, in the order
    /// of [`Self::names`].
    pub(crate) fn texts(&self) -> Vec<(String, String)> {
        let mut texts = vec![(SCHEMA_FILE.to_owned(), self.schema.clone())];
        texts.extend(self.policies.iter().map(|(n, t)| (n.clone(), t.clone())));
        if let Some(text) = &self.entities {
            texts.push((ENTITIES_FILE.to_owned(), text.clone()));
        }
        if let Some(text) = &self.programs {
            texts.push((PROGRAMS_FILE.to_owned(), text.clone()));
        }
        texts.extend(self.invariants.iter().map(|(n, t)| (n.clone(), t.clone())));
        texts
    }

    pub(super) fn names(&self) -> Vec<String> {
        let mut names = vec![SCHEMA_FILE.to_owned()];
        names.extend(self.policies.keys().cloned());
        if self.entities.is_some() {
            names.push(ENTITIES_FILE.to_owned());
        }
        if self.programs.is_some() {
            names.push(PROGRAMS_FILE.to_owned());
        }
        names.extend(self.invariants.keys().cloned());
        names
    }

    /// `sha256:` and the first 16 hex digits of a hash over every file's name and text.
    pub(crate) fn version(&self) -> String {
        let mut hasher = Sha256::new();
        let mut add = |name: &str, text: &str| {
            for part in [name, text] {
                hasher.update((part.len() as u64).to_be_bytes());
                hasher.update(part.as_bytes());
            }
        };
        add(SCHEMA_FILE, &self.schema);
        for (name, text) in &self.policies {
            add(name, text);
        }
        if let Some(text) = &self.entities {
            add(ENTITIES_FILE, text);
        }
        if let Some(text) = &self.programs {
            add(PROGRAMS_FILE, text);
        }
        for (name, text) in &self.invariants {
            add(name, text);
        }
        let digest = hex::encode(hasher.finalize());
        format!("sha256:{}", digest.get(..16).unwrap_or(&digest))
    }
}

/// Writes a policy set's files (as [`PolicyFiles::texts`] gives them, from
/// a monitor) into `dir`, which must not exist yet or be empty. Only the
/// names a policy folder holds are written (`schema.cedarschema`,
/// `entities.json`, `programs.toml`, `NAME.cedar`, `invariants/NAME.cedar`);
/// any other name, one that climbs out of the folder among them, is refused
/// before anything is written.
pub fn write_files(dir: &Path, files: &[(String, String)]) -> Result<(), String> {
    let plain = |name: &str| {
        !name.is_empty() && !name.starts_with('.') && name.ends_with(".cedar") && !name.contains(['/', '\\', '\0'])
    };
    for (name, _) in files {
        let fits = match name.split_once('/') {
            None => plain(name) || [SCHEMA_FILE, ENTITIES_FILE, PROGRAMS_FILE].contains(&name.as_str()),
            Some((folder, rest)) => folder == INVARIANTS_DIR && plain(rest),
        };
        if !fits {
            return Err(format!("`{name}` is not a file of a policy folder"));
        }
    }
    if dir.exists() && std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.next().is_some() {
        return Err(format!("{} is not empty", dir.display()));
    }
    std::fs::create_dir_all(dir.join(INVARIANTS_DIR)).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, text) in files {
        let path: PathBuf = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(names: &[&str]) -> Vec<(String, String)> {
        names.iter().map(|n| ((*n).to_owned(), format!("// {n}"))).collect()
    }

    #[test]
    fn only_a_policy_folders_files_are_written_and_into_an_empty_folder() {
        let root = tempfile::tempdir().unwrap();
        for bad in ["../x.cedar", "/etc/x.cedar", "invariants/../../x.cedar", "x.txt", ".x.cedar", "sub/x.cedar", ""] {
            let dir = root.path().join("refused");
            let error = write_files(&dir, &texts(&["schema.cedarschema", bad])).unwrap_err();
            assert!(error.contains("is not a file of a policy folder"), "{bad}: {error}");
            assert!(!dir.exists(), "{bad}: nothing is written");
        }
        let dir = root.path().join("set");
        let good = texts(&["schema.cedarschema", "a.cedar", "entities.json", "programs.toml", "invariants/p.cedar"]);
        write_files(&dir, &good).unwrap();
        for (name, text) in &good {
            assert_eq!(&std::fs::read_to_string(dir.join(name)).unwrap(), text);
        }
        let again = write_files(&dir, &good).unwrap_err();
        assert!(again.contains("is not empty"), "{again}");
    }
}
