//! The client side of `phalanx explain` and `phalanx status`: which replica to dial, the
//! calls, and the `--kubeconfig` fallback of explain (what the API server holds).

use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use phalanx_proto::admin::{ExplainReply, ExplainRequest, StatusReply, StatusRequest};
use phalanx_statestore::Transport;

use crate::model::ObjectKey;

/// `--server [ID=]HOST:PORT`: under mutual TLS the id is required, since the replica's
/// certificate must name `replica-ID.phalanx` (docs/security.md).
pub fn parse_server(text: &str, tls: bool) -> Result<(u64, String), String> {
    let (id, addr) = match text.split_once('=') {
        Some((id, addr)) => {
            let id: u64 = id.trim().parse().ok().filter(|&i| i > 0).ok_or_else(|| {
                format!("--server {text:?}: the replica id {id:?} is not a whole number from 1")
            })?;
            (Some(id), addr.trim())
        }
        None => (None, text.trim()),
    };
    if addr
        .rsplit_once(':')
        .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    {
        return Err(format!("--server {text:?}: {addr:?} is not HOST:PORT"));
    }
    match (id, tls) {
        (Some(id), _) => Ok((id, addr.to_string())),
        (None, false) => Ok((0, addr.to_string())),
        (None, true) => Err(format!(
            "--server {text:?}: under mutual TLS give the replica's id too, as ID={addr} (its certificate must name replica-ID.phalanx), or --insecure-plaintext"
        )),
    }
}

/// `Explain` on the replica at `addr` (id `id`).
pub async fn explain(
    addr: &str,
    id: u64,
    transport: &Transport,
    key: &ObjectKey,
) -> Result<ExplainReply, String> {
    let mut client = super::connect(addr, id, transport)?;
    let request = ExplainRequest {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        forwarded: false,
    };
    client
        .explain(request)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| describe(addr, &s))
}

/// `Status` on the replica at `addr` (id `id`).
pub async fn status(
    addr: &str,
    id: u64,
    transport: &Transport,
    top_pending: u32,
) -> Result<StatusReply, String> {
    let mut client = super::connect(addr, id, transport)?;
    let request = StatusRequest {
        forwarded: false,
        top_pending,
    };
    client
        .status(request)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| describe(addr, &s))
}

fn describe(addr: &str, s: &tonic::Status) -> String {
    format!(
        "the admin service at {addr}: {:?}: {}",
        s.code(),
        s.message()
    )
}

/// What the API server holds on the PodGroup: its phase, conditions and Events; for when
/// no replica's admin service answers.
pub async fn explain_from_api_server(kubeconfig: &Path, key: &ObjectKey) -> Result<String, String> {
    let client = crate::cluster::kube::make_client(Some(kubeconfig))
        .await
        .map_err(|e| format!("--kubeconfig {}: {e}", kubeconfig.display()))?;
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &key.namespace,
        &crate::cluster::kube::volcano_resource("PodGroup", "podgroups"),
    );
    let pg = groups
        .get(&key.name)
        .await
        .map_err(|e| format!("reading PodGroup {key}: {e}"))?;
    let events: Api<KubeEvent> = Api::namespaced(client, &key.namespace);
    let selector = format!("involvedObject.name={}", key.name);
    let mut listed = events
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|e| format!("listing the Events of {key}: {e}"))?
        .items;
    listed.retain(|e| e.involved_object.kind.as_deref() == Some("PodGroup"));
    Ok(render_api_view(key, &pg.data, &listed))
}

/// The PodGroup's status and Events as text (pure, for tests).
pub fn render_api_view(key: &ObjectKey, pg: &serde_json::Value, events: &[KubeEvent]) -> String {
    let status = &pg["status"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_string();
    let mut out = format!(
        "PodGroup {key}: phase {}, queue {}, minMember {} (from the API server)\n",
        text(&status["phase"]),
        text(&pg["spec"]["queue"]),
        pg["spec"]["minMember"]
            .as_u64()
            .map_or("-".into(), |n| n.to_string()),
    );
    for c in status["conditions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  condition {} {} ({}) since {}: {}",
            text(&c["type"]),
            text(&c["status"]),
            text(&c["reason"]),
            text(&c["lastTransitionTime"]),
            text(&c["message"])
        );
    }
    // Events written through events.k8s.io carry only eventTime; core ones lastTimestamp.
    let when = |e: &KubeEvent| {
        (e.last_timestamp.as_ref().map(|t| t.0)).or(e.event_time.as_ref().map(|t| t.0))
    };
    let mut events: Vec<&KubeEvent> = events.iter().collect();
    events.sort_by_key(|e| when(e));
    if !events.is_empty() {
        let _ = writeln!(
            out,
            "  events (last {} of {}):",
            events.len().min(10),
            events.len()
        );
    }
    for e in events.iter().rev().take(10).rev() {
        let _ = writeln!(
            out,
            "    {} {:<7} {:<20} {} (x{})",
            when(e).map_or("-".to_string(), |t| t.to_string()),
            e.type_.as_deref().unwrap_or("-"),
            e.reason.as_deref().unwrap_or("-"),
            e.message.as_deref().unwrap_or(""),
            e.count.unwrap_or(1)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_and_tls_needs_the_replica_id() {
        assert_eq!(
            parse_server("2=127.0.0.1:7201", true),
            Ok((2, "127.0.0.1:7201".into()))
        );
        assert_eq!(
            parse_server("host:7201", false),
            Ok((0, "host:7201".into()))
        );
        for (bad, tls, says) in [
            (
                "host:7201",
                true,
                "give the replica's id too, as ID=host:7201",
            ),
            ("0=host:1", true, "the replica id \"0\""),
            ("x=host:1", false, "the replica id \"x\""),
            ("2=host", true, "\"host\" is not HOST:PORT"),
            ("host:99999", false, "is not HOST:PORT"),
        ] {
            let e = parse_server(bad, tls).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_api_server_view_shows_conditions_and_the_last_events() {
        let pg = serde_json::json!({
            "spec": {"queue": "q", "minMember": 17},
            "status": {"phase": "Pending", "conditions": [{
                "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                "lastTransitionTime": "2026-12-01T17:00:00Z",
                "message": "17 pods need nvidia.com/gpu 136"}]},
        });
        let event: KubeEvent = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e1", "namespace": "ns"},
            "involvedObject": {"kind": "PodGroup", "name": "big"},
            "type": "Warning", "reason": "Unschedulable", "message": "not enough GPUs",
            "count": 3, "lastTimestamp": "2026-12-01T17:00:05Z",
        }))
        .expect("an Event");
        let text = render_api_view(&ObjectKey::new("ns", "big"), &pg, &[event]);
        assert_eq!(
            text,
            "PodGroup ns/big: phase Pending, queue q, minMember 17 (from the API server)\n\
             \x20 condition Unschedulable True (NotEnoughResources) since 2026-12-01T17:00:00Z: 17 pods need nvidia.com/gpu 136\n\
             \x20 events (last 1 of 1):\n\
             \x20   2026-12-01T17:00:05Z Warning Unschedulable        not enough GPUs (x3)\n"
        );
    }
}
