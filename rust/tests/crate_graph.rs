//! The workspace's crate graph is the architecture (`ARCHITECTURE.md`, "Crate graph"): the
//! compiler refuses an import of a crate that is not a dependency, so the one way left to break
//! a layer is a new dependency line in a `Cargo.toml`. This test reads the graph from
//! `cargo metadata` and fails naming the crate and the edge that is not allowed (the driver
//! reaching the client, the core reaching anything, messaging reaching the driver, ...).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each crate of the workspace and the workspace crates it may depend on (normal, dev or build).
const ALLOWED: &[(&str, &[&str])] = &[
    ("affinity-core", &[]),
    ("affinity-shm", &["affinity-core"]),
    ("affinity-media-driver", &["affinity-core", "affinity-shm"]),
    ("affinity-client", &["affinity-core", "affinity-shm"]),
    ("affinity-messaging", &["affinity-core", "affinity-shm", "affinity-client"]),
    ("affinity", &["affinity-core", "affinity-shm", "affinity-media-driver", "affinity-client", "affinity-messaging"]),
    ("affinity-jvm", &["affinity"]),
];

/// The workspace's packages and, for each, the workspace packages it depends on.
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo} metadata: {e}"));
    assert!(output.status.success(), "{cargo} metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("cargo metadata lists packages");
    let names: BTreeSet<String> =
        packages.iter().map(|p| p["name"].as_str().expect("a package has a name").to_owned()).collect();
    packages
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .expect("a package lists its dependencies")
                .iter()
                .map(|d| d["name"].as_str().expect("a dependency has a name").to_owned())
                .filter(|name| names.contains(name))
                .collect();
            (package["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let graph = workspace_graph();
    let allowed: BTreeMap<&str, BTreeSet<&str>> =
        ALLOWED.iter().map(|(name, deps)| (*name, deps.iter().copied().collect())).collect();
    let listed: BTreeSet<&str> = allowed.keys().copied().collect();
    let present: BTreeSet<&str> = graph.keys().map(String::as_str).collect();
    assert_eq!(present, listed, "the workspace's crates are not the ones this test (and ARCHITECTURE.md) lists");
    let mut wrong = Vec::new();
    for (name, deps) in &graph {
        for dep in deps {
            if !allowed[name.as_str()].contains(dep.as_str()) {
                wrong.push(format!("{name} depends on {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "dependencies against the layering of ARCHITECTURE.md: {}", wrong.join("; "));
}

#[test]
fn the_driver_and_the_client_never_depend_on_each_other() {
    let graph = workspace_graph();
    for (from, to) in [("affinity-media-driver", "affinity-client"), ("affinity-client", "affinity-media-driver")] {
        assert!(graph.contains_key(from), "no crate {from} in the workspace");
        assert!(!graph[from].contains(to), "{from} depends on {to}");
    }
}
