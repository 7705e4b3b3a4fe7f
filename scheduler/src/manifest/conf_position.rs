//! Positions in an embedded `volcano-scheduler.conf` as positions in the scenario file.
//!
//! The configuration is a string inside a ConfigMap, so its parser counts lines from the
//! start of that string. When the string is a literal block scalar (`key: |`), its lines
//! are the file's lines after the key, each indented by the same amount, so the position
//! maps exactly; for any other spelling the position stays relative to the configuration
//! text and the message says so.

use super::document::Chunk;
use super::error::FieldError;
use super::load::SCHEDULER_CONF_KEY;
use super::scheduler_conf::ConfError;

/// Rewrites the error's position to the file's lines and columns where that is exact.
pub(crate) fn conf_error_in_file(err: ConfError, chunk: Chunk<'_>) -> ConfError {
    let mapping = literal_block_origin(chunk.text).map(|(line_offset, indent)| {
        move |(line, column): (usize, usize)| {
            (chunk.first_line + line_offset + line - 1, column + indent)
        }
    });
    match (err, mapping) {
        (
            ConfError::Syntax {
                line,
                column,
                message,
            },
            Some(map),
        ) => {
            let (line, column) = map((line, column));
            ConfError::Syntax {
                line,
                column,
                message,
            }
        }
        (
            ConfError::Syntax {
                line,
                column,
                message,
            },
            None,
        ) => ConfError::Syntax {
            line,
            column,
            message: format!("{message} (line and column within the configuration text)"),
        },
        (ConfError::Field(field), Some(map)) => ConfError::Field(FieldError {
            position: field.position.map(map),
            ..field
        }),
        (ConfError::Field(field), None) => match field.position {
            Some((line, column)) => ConfError::Field(FieldError {
                problem: format!(
                    "{} (at line {line}, column {column} of the configuration text)",
                    field.problem
                ),
                position: None,
                ..field
            }),
            None => ConfError::Field(field),
        },
        (other, _) => other,
    }
}

/// For `volcano-scheduler.conf: |` (or `|-`, `|+`): the 0-based line of the key within the
/// chunk and the indentation of the block's content.
fn literal_block_origin(text: &str) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let key_line = lines.iter().position(|l| {
        let t = l.trim();
        t.strip_prefix(SCHEDULER_CONF_KEY)
            .and_then(|rest| rest.trim_start().strip_prefix(':'))
            .is_some_and(|rest| matches!(rest.trim(), "|" | "|-" | "|+"))
    })?;
    let first_content = lines[key_line + 1..]
        .iter()
        .find(|l| !l.trim().is_empty())?;
    let indent = first_content.len() - first_content.trim_start_matches(' ').len();
    Some((key_line + 1, indent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_block_positions_map_to_file_lines() {
        let text = "# c\napiVersion: v1\nkind: ConfigMap\ndata:\n  volcano-scheduler.conf: |\n    actions: allocate\n    tiers: 5\n";
        let chunk = Chunk {
            text,
            first_line: 10,
        };
        let err = ConfError::Field(FieldError {
            path: "tiers".into(),
            problem: "expected a list".into(),
            position: Some((2, 8)),
        });
        match conf_error_in_file(err, chunk) {
            ConfError::Field(f) => assert_eq!(f.position, Some((16, 12))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_spellings_say_the_position_is_within_the_configuration() {
        let chunk = Chunk {
            text: "data:\n  volcano-scheduler.conf: \"actions: 5\"\n",
            first_line: 1,
        };
        let err = ConfError::Field(FieldError {
            path: "actions".into(),
            problem: "bad".into(),
            position: Some((1, 10)),
        });
        let text = conf_error_in_file(err, chunk).to_string();
        assert!(text.contains("of the configuration text"), "{text}");
    }
}
