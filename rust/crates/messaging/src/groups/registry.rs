//! The group registry as the Python package lays it out (`affinity.groups.registry`,
//! `affinity.groups.secret`): `<registry>/groups/<name>.json` and the optional
//! `<registry>/groups/<name>.secret`, read-only.
//!
//! Readers without a Python interpreter use it: the executor JVM's publisher (`jvm/native`) and
//! the bootstrap responder of `affinity driver` and `affinity router` (`runtime::responder`);
//! `tests/test_spark_jvm.py` checks that the two readers agree.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::control::auth::{MAX_SECRET_LENGTH, MIN_SECRET_LENGTH};
use crate::control::GroupSecret;
use crate::groups::GroupConfig;

/// Environment variable naming the registry directory.
pub const REGISTRY_ENV: &str = "AFFINITY_REGISTRY";
/// Environment variable holding a group secret as hex text (every group of the process).
pub const SECRET_ENV: &str = "AFFINITY_GROUP_SECRET";
/// Environment variable naming a secret file.
pub const SECRET_FILE_ENV: &str = "AFFINITY_GROUP_SECRET_FILE";
/// Version of the definition file layout read here.
pub const REGISTRY_VERSION: u64 = 1;
/// Largest definition file read, in bytes (a definition is about 100).
pub const MAX_DEFINITION_BYTES: u64 = 64 * 1024;
/// Largest secret file read: the hex text of the longest secret and a newline.
pub const MAX_SECRET_FILE_SIZE: u64 = 2 * MAX_SECRET_LENGTH as u64 + 1;
/// Fields of a definition file.
const FIELDS: [&str; 6] = ["version", "name", "HP", "HC", "QC", "QS"];

/// The registry directory: the `registry` option, `$AFFINITY_REGISTRY`, `$XDG_STATE_HOME/affinity`,
/// `~/.local/state/affinity`.
pub fn registry_dir(option: Option<&str>) -> Result<PathBuf, String> {
    if let Some(dir) = option {
        return Ok(PathBuf::from(dir));
    }
    let set = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = set(REGISTRY_ENV) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(state) = set("XDG_STATE_HOME") {
        return Ok(PathBuf::from(state).join("affinity"));
    }
    match set("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/affinity")),
        None => Err(format!("no registry: set option registry or ${REGISTRY_ENV} (HOME is not set)")),
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
    if !first_ok || name.len() > 64 || !bytes.all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
        return Err(format!("group name {name:?} is invalid: expected [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}"));
    }
    Ok(())
}

/// Reads a regular file (never through a link) of at most `max` bytes.
fn read_small(path: &Path, max: u64, what: &str) -> Result<Option<Vec<u8>>, String> {
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc_nofollow()).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read the {what} {}: {error}", path.display())),
    };
    let metadata = file.metadata().map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("the {what} {} is not a regular file", path.display()));
    }
    if metadata.len() > max {
        return Err(format!("the {what} {} has {} bytes, more than {max}", path.display(), metadata.len()));
    }
    let mut data = Vec::new();
    file.take(max + 1).read_to_end(&mut data).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    Ok(Some(data))
}

fn libc_nofollow() -> i32 {
    libc::O_NOFOLLOW
}

fn field<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
    source: &str,
) -> Result<&'a serde_json::Value, String> {
    object.get(key).ok_or_else(|| format!("{source}: field {key:?} is missing"))
}

fn text(object: &serde_json::Map<String, serde_json::Value>, key: &str, source: &str) -> Result<String, String> {
    field(object, key, source)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{source}: field {key:?} must be a str, found {}", object[key]))
}

fn integer(object: &serde_json::Map<String, serde_json::Value>, key: &str, source: &str) -> Result<u64, String> {
    field(object, key, source)?
        .as_u64()
        .ok_or_else(|| format!("{source}: field {key:?} must be a non-negative int, found {}", object[key]))
}

/// The names of the groups defined in `registry` (`groups/<name>.json` with a valid name),
/// sorted; an unreadable or missing folder has none.
pub fn group_names(registry: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(registry.join("groups")) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|file| file.strip_suffix(".json").map(str::to_owned))
        .filter(|name| check_name(name).is_ok())
        .collect();
    names.sort();
    names
}

/// Where the registry directory `registry` keeps group `name`'s definition.
pub fn group_file(name: &str, registry: &Path) -> PathBuf {
    registry.join("groups").join(format!("{name}.json"))
}

/// The definition of group `name` in the registry directory `registry`.
pub fn load_group(name: &str, registry: &Path) -> Result<GroupConfig, String> {
    check_name(name)?;
    let path = group_file(name, registry);
    let source = path.display().to_string();
    let Some(data) = read_small(&path, MAX_DEFINITION_BYTES, "group definition")? else {
        return Err(format!("unknown group '{name}': no {source}"));
    };
    let value: serde_json::Value =
        serde_json::from_slice(&data).map_err(|e| format!("{source}: not valid JSON: {e}"))?;
    let object = value.as_object().ok_or_else(|| format!("{source}: expected a JSON object"))?;
    let version = object.get("version").and_then(serde_json::Value::as_u64);
    if version != Some(REGISTRY_VERSION) {
        return Err(format!(
            "{source}: unsupported version {:?} (this reader knows {REGISTRY_VERSION})",
            object.get("version")
        ));
    }
    if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(format!("{source}: unknown field {unknown:?}"));
    }
    let stored = text(object, "name", &source)?;
    if stored != name {
        return Err(format!("{source}: defines group {stored:?}, not {name:?}"));
    }
    let counts = |key: &str| -> Result<u32, String> {
        u32::try_from(integer(object, key, &source)?).map_err(|_| format!("{source}: field {key:?} is out of range"))
    };
    GroupConfig::new(name, &text(object, "HP", &source)?, counts("HC")?, counts("QC")?, integer(object, "QS", &source)?)
        .map_err(|e| format!("{source}: {e}"))
}

fn secret_of_hex(text: &[u8], source: &str) -> Result<GroupSecret, String> {
    let text = std::str::from_utf8(text).map_err(|_| format!("{source}: the group secret is not hex text"))?;
    let bytes = hex::decode(text.trim()).map_err(|e| format!("{source}: the group secret is not hex text: {e}"))?;
    GroupSecret::new(&bytes).map_err(|_| {
        format!("{source}: a group secret has {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} bytes, found {}", bytes.len())
    })
}

fn secret_file(path: &Path) -> Result<Option<GroupSecret>, String> {
    let Some(data) = read_small(path, MAX_SECRET_FILE_SIZE, "group secret")? else {
        return Ok(None);
    };
    let metadata = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if metadata.uid() != crate::safe_fs::current_uid() || metadata.mode() & 0o077 != 0 {
        return Err(format!(
            "the group secret {} must be owned by this user and not readable by group or others (mode {:o})",
            path.display(),
            metadata.mode() & 0o777
        ));
    }
    secret_of_hex(&data, &path.display().to_string()).map(Some)
}

/// The group's secret, the first that is set: `$AFFINITY_GROUP_SECRET` (hex),
/// `$AFFINITY_GROUP_SECRET_FILE`, `<registry>/groups/<name>.secret`; `None` when unauthenticated.
pub fn load_secret(name: &str, registry: &Path) -> Result<Option<GroupSecret>, String> {
    check_name(name)?;
    if let Some(text) = std::env::var_os(SECRET_ENV).filter(|v| !v.is_empty()) {
        return secret_of_hex(text.as_encoded_bytes(), &format!("${SECRET_ENV}")).map(Some);
    }
    if let Some(path) = std::env::var_os(SECRET_FILE_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return match secret_file(&path)? {
            Some(secret) => Ok(Some(secret)),
            None => Err(format!("${SECRET_FILE_ENV}: {} does not exist", path.display())),
        };
    }
    secret_file(&registry.join("groups").join(format!("{name}.secret")))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A registry folder removed when the test ends.
    struct Folder(PathBuf);

    impl Drop for Folder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for Folder {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn registry(name: &str) -> Folder {
        let dir = std::env::temp_dir().join(format!("affinity-registry-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("groups")).unwrap();
        Folder(dir)
    }

    fn define(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join("groups").join(format!("{name}.json")), text).unwrap();
    }

    #[test]
    fn reads_a_definition_as_the_python_registry_writes_it() {
        let dir = registry("ok");
        define(
            &dir,
            "orders",
            r#"{"version": 1, "name": "orders", "HP": "__orders__", "HC": 32, "QC": 6, "QS": 8388608}"#,
        );
        let config = load_group("orders", &dir).unwrap();
        assert_eq!((config.hash_count, config.queue_count, config.queue_size), (32, 6, 8 << 20));
        assert_eq!(config.hash_prefix, "__orders__");
        assert!(load_secret("orders", &dir).unwrap().is_none());
        define(&dir, "bad name", "{}");
        std::fs::write(dir.join("groups/orders.secret"), "").unwrap();
        assert_eq!(group_names(&dir), vec!["orders".to_string()]);
        assert!(group_names(&dir.join("nosuch")).is_empty());
    }

    #[test]
    fn refuses_missing_malformed_and_hostile_definitions() {
        let dir = registry("bad");
        let error = load_group("nosuch", &dir).unwrap_err();
        assert!(error.contains("unknown group 'nosuch': no "), "{error}");
        assert!(load_group("../etc", &dir).unwrap_err().contains("is invalid"));
        define(&dir, "a", "{not json");
        assert!(load_group("a", &dir).unwrap_err().contains("not valid JSON"));
        define(&dir, "b", r#"{"version": 2, "name": "b", "HP": "x", "HC": 4, "QC": 2, "QS": 4096}"#);
        assert!(load_group("b", &dir).unwrap_err().contains("unsupported version"));
        define(&dir, "c", r#"{"version": 1, "name": "c", "HP": "x", "HC": 1, "QC": 2, "QS": 4096}"#);
        assert!(load_group("c", &dir).unwrap_err().contains("HC >= QC"));
        define(&dir, "d", r#"{"version": 1, "name": "d", "HP": "x", "HC": 4, "QC": 2, "QS": 4096, "extra": 1}"#);
        assert!(load_group("d", &dir).unwrap_err().contains("unknown field \"extra\""));
        define(&dir, "e", r#"{"version": 1, "name": "other", "HP": "x", "HC": 4, "QC": 2, "QS": 4096}"#);
        assert!(load_group("e", &dir).unwrap_err().contains("defines group \"other\""));
        define(&dir, "f", &" ".repeat(MAX_DEFINITION_BYTES as usize + 1));
        assert!(load_group("f", &dir).unwrap_err().contains("more than"));
        std::os::unix::fs::symlink(dir.join("groups/a.json"), dir.join("groups/g.json")).unwrap();
        assert!(load_group("g", &dir).unwrap_err().contains("cannot read"));
    }

    #[test]
    fn reads_the_registry_secret_only_when_private() {
        let dir = registry("secret");
        let path = dir.join("groups/s.secret");
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_secret("s", &dir).unwrap().is_some());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_secret("s", &dir).unwrap_err().contains("not readable by group or others"));
        std::fs::write(&path, "zz").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_secret("s", &dir).unwrap_err().contains("not hex text"));
        std::fs::write(&path, "abcd").unwrap();
        assert!(load_secret("s", &dir).unwrap_err().contains("16 to 1024 bytes, found 2"));
    }
}
