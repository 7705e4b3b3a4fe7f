//! Rendering the chart with `helm template` and finding objects in the result.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The documents `helm template` printed, as JSON values.
pub type Rendered = Vec<Value>;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives in the workspace")
        .to_path_buf()
}

pub fn read_repo_file(path: &str) -> String {
    let full = repo_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/phalanx")
}

/// `$PHALANX_HELM`, else the binary `deploy/testbed/testbed build --helm` made.
pub fn helm() -> PathBuf {
    if let Some(p) = std::env::var_os("PHALANX_HELM") {
        return PathBuf::from(p);
    }
    let out = Command::new(repo_root().join("deploy/testbed/testbed"))
        .args(["tool-path", "helm"])
        .output()
        .expect("deploy/testbed/testbed runs");
    assert!(
        out.status.success(),
        "no helm: {} (or set PHALANX_HELM)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn template(namespace: &str, args: &[String]) -> std::process::Output {
    Command::new(helm())
        .arg("template")
        .arg("phalanx")
        .arg(chart_dir())
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .expect("helm runs")
}

fn set_args(sets: &[&str]) -> Vec<String> {
    sets.iter()
        .flat_map(|s| ["--set".to_string(), s.to_string()])
        .collect()
}

/// `helm template phalanx deploy/helm/phalanx -n NAMESPACE --set ...`, parsed.
pub fn render(namespace: &str, sets: &[&str]) -> Rendered {
    render_args(namespace, &set_args(sets))
}

/// `helm template` with any further arguments (`--set-file`, `-f`), parsed.
pub fn render_args(namespace: &str, args: &[String]) -> Rendered {
    let out = template(namespace, args);
    assert!(
        out.status.success(),
        "helm template {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_documents(&String::from_utf8_lossy(&out.stdout))
}

/// The error `helm template` gives for `sets`; panics if it renders.
pub fn render_err(namespace: &str, sets: &[&str]) -> String {
    let out = template(namespace, &set_args(sets));
    assert!(!out.status.success(), "helm template {sets:?} rendered");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Splits at `---` lines (helm starts every document with one) and reads each document.
pub fn parse_documents(text: &str) -> Rendered {
    let mut docs = Vec::new();
    let mut current = String::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line == "---" {
            let has_content = current
                .lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
            if has_content {
                let doc: Value = serde_saphyr::from_str(&current)
                    .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{current}"));
                docs.push(doc);
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs
}

pub fn objects_of_kind<'a>(docs: &'a Rendered, kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The one object of `kind` named `name`.
pub fn find<'a>(docs: &'a Rendered, kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = objects_of_kind(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name}");
    found[0]
}

/// The one StatefulSet.
pub fn statefulset(docs: &Rendered) -> &Value {
    let all = objects_of_kind(docs, "StatefulSet");
    assert_eq!(all.len(), 1, "one StatefulSet");
    all[0]
}

/// The StatefulSet's one container.
pub fn container(docs: &Rendered) -> &Value {
    let containers = statefulset(docs)["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}
