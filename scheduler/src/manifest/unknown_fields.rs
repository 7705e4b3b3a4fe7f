//! Fields a manifest has and phalanx's types do not (`minMembr: 3`): reported, never
//! silently dropped. Kubernetes answers the same input with kubectl's "unknown field"
//! warning, or an error under strict field validation; phalanx warns, and refuses under
//! `--strict-config` (`LoadOptions::strict_config`).

use super::error::FieldError;
use super::quantity_text::SkippedField;

/// Top-level fields every document may carry that a typed read need not have: the header
/// (read on its own first) and a `status` written by controllers, which phalanx does not
/// read from a Job.
pub(crate) const ROOT_FIELDS_READ_ELSEWHERE: &[&str] = &["apiVersion", "kind", "status"];

/// The skipped fields that are really unknown.
pub(crate) fn unknown_fields(skipped: Vec<SkippedField>) -> Vec<SkippedField> {
    skipped
        .into_iter()
        .filter(|f| !ROOT_FIELDS_READ_ELSEWHERE.contains(&f.path.as_str()))
        .collect()
}

/// The warning (or, in strict mode, the error) for one unknown field.
pub(crate) fn unknown_field_error(field: &SkippedField, strict: bool) -> FieldError {
    let hint = nearest_known(field)
        .map(|known| format!("; did you mean `{known}`?"))
        .unwrap_or_default();
    let consequence = if strict {
        "strict checking (--strict-config) refuses unknown fields"
    } else {
        "phalanx ignores it (an error under --strict-config)"
    };
    FieldError::new(
        field.path.clone(),
        format!("unknown field (value {}){hint}; {consequence}", field.value),
    )
}

/// The enclosing object's field closest to the unknown one, when it is a likely typo: the
/// same but for case, or at most two edits away.
fn nearest_known(field: &SkippedField) -> Option<&'static str> {
    let name = field.path.rsplit('.').next().unwrap_or(&field.path);
    let name = name.to_ascii_lowercase();
    field
        .known
        .iter()
        .map(|known| (edit_distance(&name, &known.to_ascii_lowercase()), *known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

/// Levenshtein distance (insertions, deletions, substitutions), by rows.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("minmembr", "minmember"), 1);
        assert_eq!(edit_distance("queue", "queue"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
