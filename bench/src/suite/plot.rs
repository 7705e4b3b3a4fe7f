//! The growth plots, drawn by the repository's one plotting script, `bench/plot_svg.py`
//! (standard-library Python, so a bare machine can redraw the committed SVGs by hand with
//! the command the suite prints).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The script beside this crate's manifest: found wherever the suite is run from.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("plot_svg.py")
}

/// Fails at once, before any measurement, when the plots could not be drawn at the end.
pub fn check_python() -> Result<()> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        bail!(
            "python3 is not on PATH: the growth part draws its plots with {} (standard-library Python); install python3 or leave growth out with --only",
            script().display()
        );
    }
    if !script().is_file() {
        bail!("{} is missing", script().display());
    }
    Ok(())
}

/// A log-log line chart of `csv` (`series,x,y`) into `svg`.
pub fn log_log(csv: &Path, svg: &Path, title: &str, xlabel: &str, ylabel: &str) -> Result<()> {
    let out = Command::new("python3")
        .arg(script())
        .arg("--csv")
        .arg(csv)
        .arg("--out")
        .arg(svg)
        .args(["--title", title, "--xlabel", xlabel, "--ylabel", ylabel])
        .args(["--logx", "--logy"])
        .output()
        .context("running python3")?;
    if !out.status.success() {
        bail!(
            "{} failed on {}: {}",
            script().display(),
            csv.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
