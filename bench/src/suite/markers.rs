//! The generated sections of `docs/benchmarks.md`: each lies between a line
//! `<!-- suite:NAME:begin -->` and a line `<!-- suite:NAME:end -->`. Only what is between
//! the two lines is replaced, so hand-written text around them stays byte for byte; a
//! section whose markers are missing is appended at the end under [`HEADING`].

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// The heading the appended sections go under (added once, when the file lacks it).
pub const HEADING: &str = "## The suite (`phalanx-bench suite`)";

pub fn begin_line(name: &str) -> String {
    format!("<!-- suite:{name}:begin -->")
}

pub fn end_line(name: &str) -> String {
    format!("<!-- suite:{name}:end -->")
}

/// Byte offsets of every line of `text` equal to `line` (a trailing `\r` allowed): the
/// start of the line and the start of the next one.
fn whole_lines(text: &str, line: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut at = 0;
    for l in text.split_inclusive('\n') {
        if l.trim_end_matches(['\n', '\r']) == line {
            found.push((at, at + l.len()));
        }
        at += l.len();
    }
    found
}

/// Where the body of section `name` lies (after its begin line, up to its end line), or
/// `None` when neither marker is there. Half a pair, a pair twice or an end before its
/// begin is an error naming the marker: rewriting such a file could eat hand-written text.
pub fn find(text: &str, name: &str) -> Result<Option<std::ops::Range<usize>>> {
    let (b, e) = (begin_line(name), end_line(name));
    let begins = whole_lines(text, &b);
    let ends = whole_lines(text, &e);
    match (begins.as_slice(), ends.as_slice()) {
        ([], []) => Ok(None),
        ([(_, body_start)], [(body_end, _)]) if body_start <= body_end => {
            Ok(Some(*body_start..*body_end))
        }
        ([_], [_]) => bail!("{e} comes before {b}"),
        _ => bail!(
            "{} line(s) {b} and {} line(s) {e}: expected one of each, or neither",
            begins.len(),
            ends.len()
        ),
    }
}

/// A body as it is written between the markers: ending in exactly one newline.
fn normalized(body: &str) -> String {
    format!("{}\n", body.trim_end_matches('\n'))
}

/// `text` with each `(name, body)` section replaced, and those not found appended at the
/// end, in the order given, under [`HEADING`] (added if the file has no such line).
pub fn apply(text: &str, sections: &[(String, String)]) -> Result<String> {
    let mut out = text.to_string();
    let mut missing = Vec::new();
    for (name, body) in sections {
        match find(&out, name)? {
            Some(range) => out.replace_range(range, &normalized(body)),
            None => missing.push((name, body)),
        }
    }
    if missing.is_empty() {
        return Ok(out);
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if whole_lines(&out, HEADING).is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(HEADING);
        out.push('\n');
    }
    for (name, body) in missing {
        out.push('\n');
        out.push_str(&begin_line(name));
        out.push('\n');
        out.push_str(&normalized(body));
        out.push_str(&end_line(name));
        out.push('\n');
    }
    Ok(out)
}

/// The current text of `path`, or an empty one when it does not exist yet (the suite
/// then writes a file of its own sections only).
pub fn read_or_empty(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("--out {}: reading it", path.display())),
    }
}

/// Writes `text` to `path` through a temporary file in the same directory and a rename,
/// so a reader (or a run stopped half-way) never sees half a file. Keeps the permissions
/// of the file it replaces.
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("a temporary file in {}", dir.display()))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    let perms = match std::fs::metadata(path) {
        Ok(m) => m.permissions(),
        Err(_) => std::os::unix::fs::PermissionsExt::from_mode(0o644),
    };
    std::fs::set_permissions(tmp.path(), perms)?;
    tmp.persist(path)
        .with_context(|| format!("renaming into {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn replacing_a_section_keeps_the_text_outside_its_markers_byte_for_byte() {
        // Odd spacing, CRLF, no final newline: none of it may change.
        let before = "# Benchmarks\r\n\nhand  written\t text\n";
        let after = "\n## later\nmore text, no final newline";
        let text = format!(
            "{before}<!-- suite:cycle:begin -->\nold table\nold line\n<!-- suite:cycle:end -->{after}"
        );
        let out = apply(&text, &sections(&[("cycle", "| new | table |")])).unwrap();
        assert_eq!(
            out,
            format!(
                "{before}<!-- suite:cycle:begin -->\n| new | table |\n<!-- suite:cycle:end -->{after}"
            )
        );
        // Applying it again changes nothing.
        let again = apply(&out, &sections(&[("cycle", "| new | table |")])).unwrap();
        assert_eq!(again, out);
    }

    #[test]
    fn a_missing_section_is_appended_under_the_heading_once() {
        let text = "# Benchmarks\n\nhand-written";
        let out = apply(text, &sections(&[("run", "the run"), ("growth", "g")])).unwrap();
        assert_eq!(
            out,
            format!(
                "# Benchmarks\n\nhand-written\n\n{HEADING}\n\n<!-- suite:run:begin -->\nthe run\n<!-- suite:run:end -->\n\n<!-- suite:growth:begin -->\ng\n<!-- suite:growth:end -->\n"
            )
        );
        // A later run with one more part appends it without a second heading, and
        // replaces the two it finds.
        let out2 = apply(
            &out,
            &sections(&[("run", "run 2"), ("growth", "g2"), ("kube", "k")]),
        )
        .unwrap();
        assert_eq!(out2.matches(HEADING).count(), 1);
        assert!(out2.starts_with("# Benchmarks\n\nhand-written\n\n"));
        assert!(out2.contains("<!-- suite:run:begin -->\nrun 2\n<!-- suite:run:end -->"));
        assert!(out2.ends_with("<!-- suite:kube:begin -->\nk\n<!-- suite:kube:end -->\n"));
    }

    #[test]
    fn an_empty_file_gets_the_sections_only() {
        let out = apply("", &sections(&[("run", "r")])).unwrap();
        assert_eq!(
            out,
            format!("{HEADING}\n\n<!-- suite:run:begin -->\nr\n<!-- suite:run:end -->\n")
        );
    }

    #[test]
    fn half_a_pair_or_a_pair_twice_is_refused_naming_the_marker() {
        let half = "a\n<!-- suite:kube:begin -->\nb\n";
        let e = apply(half, &sections(&[("kube", "x")])).unwrap_err();
        assert!(e.to_string().contains("suite:kube:end"), "{e}");
        let twice = "<!-- suite:kube:begin -->\n<!-- suite:kube:end -->\n<!-- suite:kube:begin -->\n<!-- suite:kube:end -->\n";
        assert!(apply(twice, &sections(&[("kube", "x")])).is_err());
        let reversed = "<!-- suite:kube:end -->\n<!-- suite:kube:begin -->\n";
        let e = apply(reversed, &sections(&[("kube", "x")])).unwrap_err();
        assert!(e.to_string().contains("comes before"), "{e}");
        // A marker quoted inside a line is not a marker.
        let quoted = "see `<!-- suite:kube:begin -->` in the text\n";
        assert!(find(quoted, "kube").unwrap().is_none());
    }

    #[test]
    fn the_file_is_written_whole_with_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("b.md");
        assert_eq!(read_or_empty(&path).unwrap(), "");
        write_atomically(&path, "one\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomically(&path, "two\n").unwrap();
        assert_eq!(read_or_empty(&path).unwrap(), "two\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // Nothing else is left in the directory (the temporary file was renamed).
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }
}
