//! Helpers shared by the integration tests that read the captured wire vectors
//! (`rust/tests/vectors/`, a copy of the Aeron 1.48 captures kept in the repository).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

const DEFAULT_VECTORS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");

pub fn vectors_dir() -> PathBuf {
    let dir = std::env::var_os("AFFINITY_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_VECTORS_DIR));
    assert!(
        dir.is_dir(),
        "wire test vectors not found at {} (they are part of the repository: rust/tests/vectors; AFFINITY_VECTORS_DIR overrides)",
        dir.display()
    );
    dir
}

pub fn load(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn from_hex(text: &str) -> Vec<u8> {
    assert!(text.len() % 2 == 0, "odd hex length");
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit")).collect()
}
