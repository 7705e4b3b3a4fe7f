//! What can be wrong with a scenario file, said so that a user can find and fix it.
//!
//! Every [`ManifestError`] names where the problem is ([`DocLocation`]: file, 0-based document
//! index, the line the document starts on), the object when it is known (`Pod default/web-0`)
//! and the problem; a [`FieldError`] adds the field path
//! (`spec.containers[0].resources.requests.cpu`), the offending text and, for YAML-level
//! problems, the line and column. Rendered:
//!
//! ```text
//! scenario.yaml: document 3 (line 42), Pod default/web-0: spec.containers[0].resources.requests.cpu: "abc" is not a Kubernetes quantity (it has no digits)
//! ```

use std::fmt;

use thiserror::Error;

use super::scheduler_conf::ConfError;

/// Where in the input a problem is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DocLocation {
    /// The file, when the input came from one.
    pub file: Option<String>,
    /// 0-based index of the document, counting only non-empty documents, continuing across
    /// the files of one load.
    pub index: Option<usize>,
    /// 1-based line, in its file, where the document starts.
    pub line: Option<usize>,
}

impl fmt::Display for DocLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut wrote = false;
        if let Some(file) = &self.file {
            write!(f, "{file}")?;
            wrote = true;
        }
        if let Some(index) = self.index {
            if wrote {
                f.write_str(": ")?;
            }
            write!(f, "document {index}")?;
            wrote = true;
        }
        if let Some(line) = self.line {
            if wrote {
                f.write_str(" ")?;
            }
            write!(f, "(line {line})")?;
            wrote = true;
        }
        if !wrote {
            f.write_str("input")?;
        }
        Ok(())
    }
}

/// A load failure: where, which object, what.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub struct ManifestError {
    pub at: DocLocation,
    /// `Kind namespace/name` (or `Kind name` for cluster-scoped kinds) when known.
    pub object: Option<String>,
    /// Boxed to keep `Result<_, ManifestError>` small.
    pub problem: Box<Problem>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.at)?;
        if let Some(object) = &self.object {
            write!(f, ", {object}")?;
        }
        write!(f, ": {}", self.problem)
    }
}

impl ManifestError {
    pub fn new(at: DocLocation, object: Option<String>, problem: Problem) -> Self {
        Self {
            at,
            object,
            problem: Box::new(problem),
        }
    }
}

/// The kinds of problem a scenario can have.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Problem {
    #[error("cannot read it: {0}")]
    Read(String),
    #[error("YAML syntax error at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the document has no `{missing}`; every document needs `apiVersion` and `kind`")]
    MissingKind { missing: &'static str },
    #[error(
        "`{api_version}` `{kind}` is not a kind phalanx reads; a scenario may hold {}",
        super::KNOWN_KINDS.join(", ")
    )]
    UnknownKind { api_version: String, kind: String },
    #[error("{0}")]
    Field(FieldError),
    #[error("{0}")]
    Invalid(String),
    #[error("volcano-scheduler.conf: {0}")]
    Conf(ConfError),
}

/// A problem in one field of one object: the path, what is wrong (quoting the text), and
/// where in the YAML when that is known.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub struct FieldError {
    /// Dotted path with indices, e.g. `spec.containers[0].resources.requests.cpu`; empty for
    /// the document as a whole.
    pub path: String,
    pub problem: String,
    /// (line, column), 1-based, in the file, for problems found while reading the YAML.
    pub position: Option<(usize, usize)>,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.problem)?;
        if let Some((line, column)) = self.position {
            write!(f, " (at line {line}, column {column})")?;
        }
        Ok(())
    }
}

impl FieldError {
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            problem: problem.into(),
            position: None,
        }
    }

    /// `text` is not one of `allowed`.
    pub fn not_one_of(path: impl Into<String>, text: &str, what: &str, allowed: &[&str]) -> Self {
        Self::new(
            path,
            format!(
                "{text:?} is not a valid {what}; use one of {}",
                allowed.join(", ")
            ),
        )
    }

    /// A required field is absent.
    pub fn missing(path: impl Into<String>) -> Self {
        Self::new(path, "is required but missing")
    }

    /// The same error under a longer path (`spec.tasks[1].template.` + `spec.containers`).
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = if self.path.is_empty() {
            prefix.trim_end_matches('.').to_string()
        } else {
            format!("{prefix}{}", self.path)
        };
        self
    }
}
