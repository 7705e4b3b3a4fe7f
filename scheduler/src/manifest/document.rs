//! One YAML document of a scenario file: its text, where it starts, and how to read it.
//!
//! The file is split at document markers (`---` / `...` at the start of a line, which YAML
//! forbids inside any scalar, so the split is exact) rather than handed to a multi-document
//! reader, because each document is read twice: first its `apiVersion`/`kind` header, then
//! the whole of it as the type the header names. Each read goes through
//! `serde_path_to_error` (for the field path) and [`QuantityText`] (so quantities keep the
//! text the user wrote); YAML positions are shifted back to lines of the file.

use std::rc::Rc;

use serde::Deserialize;

use super::error::{DocLocation, FieldError, Problem};
use super::quantity_text::{QuantityText, Skipped, SkippedField};

/// Nesting, alias and size limits applied to every document (a hostile file must not blow
/// the stack or memory).
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        with_snippet: false,
        // Unread fields are skipped with `deserialize_any`; `cpu: 1e400` there must not
        // fail before the field that reads it as a quantity reports it properly.
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    }
}

/// A non-split piece of a file: the text of one document and the 1-based line it starts on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunk<'a> {
    pub text: &'a str,
    pub first_line: usize,
}

impl Chunk<'_> {
    /// The line of the document's first content (past markers, directives, comments and
    /// blank lines), which is where a user looks for it.
    pub fn content_line(&self) -> usize {
        let skip = self
            .text
            .lines()
            .take_while(|l| {
                let t = l.trim();
                t.is_empty()
                    || t.starts_with('#')
                    || t.starts_with('%')
                    || (is_marker(l, "---") && t == "---")
            })
            .count();
        self.first_line + skip
    }
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Splits `text` at document markers; empty chunks are kept (the caller skips them).
pub(crate) fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut start_line = 1;
    // First line of a trailing run of directive (`%YAML`) lines: they belong to the next
    // document.
    let mut directives_from: Option<(usize, usize)> = None;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let line_no = i + 1;
        if is_marker(line, "---") {
            let (cut, cut_line) = directives_from.unwrap_or((offset, line_no));
            if cut > start {
                chunks.push(Chunk {
                    text: &text[start..cut],
                    first_line: start_line,
                });
            }
            start = cut;
            start_line = cut_line;
            directives_from = None;
        } else if is_marker(line, "...") {
            let end = offset + line.len();
            chunks.push(Chunk {
                text: &text[start..end],
                first_line: start_line,
            });
            start = end;
            start_line = line_no + 1;
            directives_from = None;
        } else if line.starts_with('%') {
            directives_from.get_or_insert((offset, line_no));
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            directives_from = None;
        }
        offset += line.len();
    }
    chunks.push(Chunk {
        text: &text[start..],
        first_line: start_line,
    });
    chunks
}

/// The fields every document is first read for. Scalars are read as their text (so
/// `name: n` is the name "n", not YAML 1.1's `false`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Header {
    #[serde(rename = "apiVersion", default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: Option<HeaderMeta>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct HeaderMeta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// A header field's text, when present and not empty.
pub(crate) fn text(field: &Option<String>) -> Option<&str> {
    field.as_deref().filter(|s| !s.is_empty())
}

/// A document ready to be read: its chunk and where it is.
#[derive(Clone, Debug)]
pub(crate) struct Document<'a> {
    pub chunk: Chunk<'a>,
    pub at: DocLocation,
}

impl<'a> Document<'a> {
    /// Reads the document as `T`. Type errors carry the field path and position; syntax
    /// errors carry the position.
    pub fn read<T: Deserialize<'a>>(&self) -> Result<T, Problem> {
        read_chunk(self.chunk).map(|(value, _)| value)
    }

    /// Reads the document as `T`, with the fields `T` does not have (see [`Skipped`]).
    pub fn read_noting_unknown<T: Deserialize<'a>>(
        &self,
    ) -> Result<(T, Vec<SkippedField>), Problem> {
        read_chunk(self.chunk)
    }
}

/// Reads `chunk` as `T` (see [`Document::read`]), with the fields it skipped.
pub(crate) fn read_chunk<'a, T: Deserialize<'a>>(
    chunk: Chunk<'a>,
) -> Result<(T, Vec<SkippedField>), Problem> {
    let mut path = String::new();
    let skipped = Rc::new(Skipped::default());
    let result =
        serde_saphyr::with_deserializer_from_str_with_options(chunk.text, yaml_options(), |de| {
            serde_path_to_error::deserialize(QuantityText(de, Rc::clone(&skipped))).map_err(|e| {
                path = e.path().to_string();
                e.into_inner()
            })
        });
    let value = result.map_err(|e| yaml_problem(&e, &path, chunk))?;
    Ok((value, skipped.take()))
}

/// Turns a serde-saphyr error into a [`Problem`] with file positions; a type mismatch
/// also quotes the text found where the value was expected.
fn yaml_problem(err: &serde_saphyr::Error, path: &str, chunk: Chunk<'_>) -> Problem {
    let inner = err.without_snippet();
    let message = readable_message(inner);
    let local = inner
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| (l.line() as usize, l.column() as usize));
    let position = local.map(|(line, column)| (line + chunk.first_line - 1, column));
    let is_syntax = matches!(
        inner,
        serde_saphyr::Error::ExternalMessage { source, .. }
            if matches!(**source, serde_saphyr::ExternalMessageSource::Parser(_))
    );
    if is_syntax && let Some((line, column)) = position {
        return Problem::Syntax {
            line,
            column,
            message,
        };
    }
    let path = if path == "." || path == "?" { "" } else { path };
    let about_a_value = message.starts_with("expected") || message.starts_with("invalid");
    let found = local
        .filter(|_| about_a_value)
        .and_then(|(line, column)| text_at(chunk.text, line, column));
    let problem = match found {
        Some(found) => format!("{}, found {found:?}", friendlier(&message)),
        None => friendlier(&message),
    };
    Problem::Field(FieldError {
        path: path.to_string(),
        problem,
        position,
    })
}

/// serde-saphyr's terse type messages in words a manifest author uses.
fn friendlier(message: &str) -> String {
    match message {
        "expected sequence start" => "expected a list".to_string(),
        "expected mapping start" => "expected a mapping of `key: value` entries".to_string(),
        "expected string scalar" => "expected a single value (text or a number)".to_string(),
        other => other.to_string(),
    }
}

/// The rest of the source line at (1-based) `line`/`column`, trimmed and shortened.
fn text_at(text: &str, line: usize, column: usize) -> Option<String> {
    const MAX_CHARS: usize = 40;
    let source_line = text.lines().nth(line.checked_sub(1)?)?;
    let rest: String = source_line.chars().skip(column.saturating_sub(1)).collect();
    let rest = rest.trim();
    // One scalar, not the rest of the line: a quoted scalar ends at its quote, a plain one
    // at a flow indicator or a comment (`{minMember: lots}` quotes `lots`).
    let rest = match rest.chars().next() {
        None => return None,
        Some(q @ ('"' | '\'')) => rest[1..].split(q).next().unwrap_or(""),
        Some('{' | '[') => rest,
        Some(_) => rest
            .split([',', '}', ']'])
            .next()
            .unwrap_or(rest)
            .split(" #")
            .next()
            .unwrap_or(rest)
            .trim_end(),
    };
    if rest.is_empty() {
        return None;
    }
    let mut shown: String = rest.chars().take(MAX_CHARS).collect();
    if rest.chars().count() > MAX_CHARS {
        shown.push_str("...");
    }
    Some(shown)
}

/// The error's message without serde-saphyr's location suffix, with control characters
/// escaped (the text may quote the user's input).
fn readable_message(err: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    let text = serde_saphyr::UserMessageFormatter.format_message(err);
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_finds_documents_and_their_first_lines() {
        let text = "# comment\na: 1\n---\nb: 2\n--- \nc: |\n  ---x\n...\n%YAML 1.2\n---\nd: 4\n";
        let chunks = split_documents(text);
        let firsts: Vec<usize> = chunks.iter().map(|c| c.first_line).collect();
        assert_eq!(firsts, vec![1, 3, 5, 9]);
        assert!(chunks[2].text.contains("---x"));
        assert!(chunks[3].text.starts_with("%YAML"));
    }

    #[test]
    fn a_marker_needs_a_space_or_line_end_after_it() {
        assert_eq!(split_documents("a: 1\n----\n").len(), 1);
        assert_eq!(split_documents("a: 1\n---\n").len(), 2);
    }
}
