//! Helpers the tests of the `phalanx` binary share.

use std::path::Path;
use std::process::Command;

/// Runs `phalanx ARGS`; returns the exit code, stdout and stderr.
pub fn phalanx(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phalanx"))
        .args(args)
        .output()
        .expect("phalanx runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The path of a scenario file of this crate's test suite.
pub fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(name)
        .display()
        .to_string()
}
