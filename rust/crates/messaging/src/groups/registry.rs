//! The group registry as the Python package lays it out (`affinity.groups.registry`,
//! `affinity.groups.secret`): `<registry>/groups/<name>.json` and the optional
//! `<registry>/groups/<name>.secret`, read-only.
//!
//! As the Python reader and discovery do (`crate::safe_fs`): the registry and its `groups` folder
//! must be real directories of this user that group and others cannot write, and files are read
//! as regular files without following a link or blocking, size-capped. Another user's folder, a
//! FIFO or a link to `/dev/zero` is an error naming the path at once.
//!
//! Readers without a Python interpreter use it: the executor JVM's publisher (`jvm/native`) and
//! the bootstrap responder of `affinity driver` and `affinity router` (`runtime::responder`);
//! `tests/test_spark_jvm.py` checks that the two readers agree.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::control::auth::{MAX_SECRET_LENGTH, MIN_SECRET_LENGTH};
use crate::control::GroupSecret;
use crate::groups::GroupConfig;
use crate::safe_fs;

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

/// Checks the registry directory and its `groups` folder as discovery checks its folders
/// ([`safe_fs::private_dir`]): real directories (never followed through a symbolic link) of
/// this user that group and others cannot write. `Ok(false)` when either is missing; otherwise
/// an error naming the path and its owner, so nothing another user could have placed is read.
fn check_groups_dir(registry: &Path) -> Result<bool, String> {
    for path in [registry.to_path_buf(), registry.join("groups")] {
        match safe_fs::private_dir(&path, false) {
            Ok(_) => {}
            Err(error) if error.io_error().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {
                return Ok(false)
            }
            Err(error) => return Err(format!("group registry {error}")),
        }
    }
    Ok(true)
}

/// The `safe_fs` error of opening or reading `path`, `None` when the file does not exist.
fn read_error(error: safe_fs::SafeFsError, what: &str) -> Option<String> {
    match error.io_error() {
        Some(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        _ => Some(format!("cannot read the {what} {error}")),
    }
}

/// Reads a regular file of at most `max` bytes as [`safe_fs::read_regular`] does (never through
/// a link, never blocking: a FIFO or a device is an error naming the path and what it is).
fn read_small(path: &Path, max: u64, what: &str) -> Result<Option<Vec<u8>>, String> {
    match safe_fs::read_regular(path, max) {
        Ok(data) => Ok(Some(data)),
        Err(error) => read_error(error, what).map_or(Ok(None), Err),
    }
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
    let found =
        if check_groups_dir(registry)? { read_small(&path, MAX_DEFINITION_BYTES, "group definition")? } else { None };
    let Some(data) = found else {
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
    let what = "group secret";
    let file = match safe_fs::open_regular(path, MAX_SECRET_FILE_SIZE) {
        Ok(file) => file,
        Err(error) => return read_error(error, what).map_or(Ok(None), Err),
    };
    // The descriptor that was opened is what is checked and read.
    let metadata = file.metadata().map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if metadata.uid() != safe_fs::current_uid() || metadata.mode() & 0o077 != 0 {
        return Err(format!(
            "the {what} {} must be owned by this user and not readable by group or others (mode {:o})",
            path.display(),
            metadata.mode() & 0o777
        ));
    }
    let mut data = Vec::new();
    file.take(MAX_SECRET_FILE_SIZE + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if data.len() as u64 > MAX_SECRET_FILE_SIZE {
        return Err(format!("the {what} {} has more than {MAX_SECRET_FILE_SIZE} bytes", path.display()));
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
    if !check_groups_dir(registry)? {
        return Ok(None);
    }
    secret_file(&registry.join("groups").join(format!("{name}.secret")))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

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
        let groups = dir.join("groups");
        std::fs::set_permissions(&groups, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = load_group("a", &dir).unwrap_err();
        assert!(
            error.contains(&groups.display().to_string()) && error.contains("writable by group or others"),
            "{error}"
        );
        assert!(load_secret("a", &dir).unwrap_err().contains("writable by group or others"));
        std::fs::set_permissions(&groups, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Makes a FIFO at `path`.
    fn mkfifo(path: &Path) {
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
    }

    /// Runs `read` on another thread and returns its result, failing the test if it has not
    /// returned within 2 s (a blocking `open` of a FIFO); the FIFO at `fifo` is then opened for
    /// writing so the stuck thread ends.
    fn within_two_seconds<T: Send + 'static>(fifo: &Path, read: impl FnOnce() -> T + Send + 'static) -> T {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(read());
        });
        match receiver.recv_timeout(std::time::Duration::from_secs(2)) {
            Ok(result) => result,
            Err(_) => {
                let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo);
                panic!("reading the registry blocked on the FIFO {}", fifo.display());
            }
        }
    }

    #[test]
    fn a_fifo_in_the_registry_is_refused_at_once() {
        let dir = registry("fifo");
        let fifo = dir.join("groups/g.json");
        mkfifo(&fifo);
        let registry = dir.to_path_buf();
        let error = within_two_seconds(&fifo, move || load_group("g", &registry)).unwrap_err();
        assert!(error.contains(&fifo.display().to_string()) && error.contains("a FIFO"), "{error}");
        let secret = dir.join("groups/s.secret");
        mkfifo(&secret);
        let registry = dir.to_path_buf();
        let error = within_two_seconds(&secret, move || load_secret("s", &registry)).unwrap_err();
        assert!(error.contains(&secret.display().to_string()) && error.contains("a FIFO"), "{error}");
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
