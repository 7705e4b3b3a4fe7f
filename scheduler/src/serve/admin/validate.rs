//! Admin requests checked before anything is looked up: a malformed one is answered
//! INVALID_ARGUMENT naming the field and the value.

use phalanx_proto::admin::{ExplainRequest, StatusRequest};
use tonic::Status;

use crate::model::ObjectKey;

/// Most pending PodGroups one Status lists.
pub const MAX_TOP_PENDING: u32 = 1000;
/// What Status lists when the request says 0.
pub const DEFAULT_TOP_PENDING: u32 = 20;

/// A DNS-1123 label (namespaces): 1 to 63 of `a-z0-9-`, alphanumeric at both ends.
fn dns_label(v: &str) -> Result<(), &'static str> {
    if v.is_empty() {
        return Err("is empty");
    }
    if v.len() > 63 {
        return Err("is longer than 63 characters");
    }
    check_chars(v, false)
}

/// A DNS-1123 subdomain (object names): 1 to 253 of `a-z0-9-.`, alphanumeric at both ends.
fn dns_subdomain(v: &str) -> Result<(), &'static str> {
    if v.is_empty() {
        return Err("is empty");
    }
    if v.len() > 253 {
        return Err("is longer than 253 characters");
    }
    check_chars(v, true)
}

fn check_chars(v: &str, dots: bool) -> Result<(), &'static str> {
    let ok =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    if !v.chars().all(ok) {
        return Err(if dots {
            "may hold only lower-case letters, digits, '-' and '.'"
        } else {
            "may hold only lower-case letters, digits and '-'"
        });
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(v.chars().next()) || !alnum(v.chars().last()) {
        return Err("must begin and end with a letter or digit");
    }
    Ok(())
}

fn field(name: &str, value: &str, why: &str) -> Status {
    let shown: String = value.chars().take(80).collect();
    Status::invalid_argument(format!("ExplainRequest.{name} {shown:?}: {why}"))
}

/// The PodGroup an Explain asks about.
pub fn explain_request(req: &ExplainRequest) -> Result<ObjectKey, Status> {
    dns_label(&req.namespace).map_err(|why| field("namespace", &req.namespace, why))?;
    dns_subdomain(&req.name).map_err(|why| field("name", &req.name, why))?;
    Ok(ObjectKey::new(&req.namespace, &req.name))
}

/// How many pending PodGroups a Status lists.
pub fn status_request(req: &StatusRequest) -> Result<u32, Status> {
    match req.top_pending {
        0 => Ok(DEFAULT_TOP_PENDING),
        n if n <= MAX_TOP_PENDING => Ok(n),
        n => Err(Status::invalid_argument(format!(
            "StatusRequest.top_pending {n}: must be 0 (meaning {DEFAULT_TOP_PENDING}) to {MAX_TOP_PENDING}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(namespace: &str, name: &str) -> ExplainRequest {
        ExplainRequest {
            namespace: namespace.into(),
            name: name.into(),
            forwarded: false,
        }
    }

    #[test]
    fn a_good_explain_request_names_its_podgroup() {
        let key = explain_request(&req("team-a", "train.v2-0")).expect("valid");
        assert_eq!(key.to_string(), "team-a/train.v2-0");
    }

    #[test]
    fn malformed_explain_requests_name_the_field_and_value() {
        let long = "a".repeat(64);
        for (ns, name, says) in [
            ("", "pg", "ExplainRequest.namespace \"\": is empty"),
            (
                "Team",
                "pg",
                "ExplainRequest.namespace \"Team\": may hold only",
            ),
            (
                "a.b",
                "pg",
                "ExplainRequest.namespace \"a.b\": may hold only",
            ),
            (
                "-a",
                "pg",
                "ExplainRequest.namespace \"-a\": must begin and end",
            ),
            (&long, "pg", "is longer than 63 characters"),
            ("ns", "", "ExplainRequest.name \"\": is empty"),
            ("ns", "pg/x", "ExplainRequest.name \"pg/x\": may hold only"),
            (
                "ns",
                "pg.",
                "ExplainRequest.name \"pg.\": must begin and end",
            ),
        ] {
            let e = explain_request(&req(ns, name)).expect_err(name);
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{ns}/{name}");
            assert!(e.message().contains(says), "{ns}/{name}: {}", e.message());
        }
    }

    #[test]
    fn top_pending_is_bounded_and_zero_means_the_default() {
        let r = |n| StatusRequest {
            forwarded: false,
            top_pending: n,
        };
        assert_eq!(status_request(&r(0)).ok(), Some(DEFAULT_TOP_PENDING));
        assert_eq!(status_request(&r(1000)).ok(), Some(1000));
        let e = status_request(&r(1001)).expect_err("over the bound");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.message().contains("StatusRequest.top_pending 1001"),
            "{}",
            e.message()
        );
    }
}
