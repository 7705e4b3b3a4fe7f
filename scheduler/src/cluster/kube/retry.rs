//! Bounded retries of API requests: throttling (429), server errors (5xx), timeouts and
//! broken connections are retried with exponential backoff; everything else (404, 409, 422,
//! 403, ...) is returned at once for the caller to interpret.

use std::future::Future;
use std::time::Duration;

use super::limiter::TokenBucket;

/// How a request is retried.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts in all (at least 1).
    pub max_attempts: u32,
    /// Pause after the first failed attempt; doubles each time up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 6,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// The HTTP status of an API error, if it is one.
pub fn status_code(e: &::kube::Error) -> Option<u16> {
    match e {
        ::kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A short description: the API server's message and code, not the whole Status.
pub fn describe(e: &::kube::Error) -> String {
    match e {
        ::kube::Error::Api(status) => format!("{} (HTTP {})", status.message, status.code),
        other => other.to_string(),
    }
}

/// Whether trying again later may succeed.
pub fn is_transient(e: &::kube::Error) -> bool {
    match e {
        ::kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Runs `op` until it succeeds, fails for good, or the attempts run out; each attempt first
/// takes a token from `limiter`.
pub async fn with_retry<T, F, Fut>(
    limiter: &TokenBucket,
    policy: &RetryPolicy,
    op: F,
) -> Result<T, ::kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    match with_retry_gated(limiter, policy, &|| true, op).await {
        Some(answer) => answer,
        None => unreachable!("an open gate never stops a request"),
    }
}

/// [`with_retry`], asking `gate` after each token and before each attempt: `None` when it
/// said no (no further request sent). A bind for a shard uses it to send nothing once the
/// shard is lost, however long it waited for a token or a backoff.
pub async fn with_retry_gated<T, F, Fut>(
    limiter: &TokenBucket,
    policy: &RetryPolicy,
    gate: &(dyn Fn() -> bool + Sync),
    mut op: F,
) -> Option<Result<T, ::kube::Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    let mut pause = policy.backoff;
    let mut attempt = 1;
    loop {
        limiter.acquire().await;
        if !gate() {
            return None;
        }
        match op().await {
            Ok(v) => return Some(Ok(v)),
            Err(e) if is_transient(&e) && attempt < policy.max_attempts.max(1) => {
                tracing::debug!(attempt, error = %e, "transient API error; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(policy.max_backoff);
                attempt += 1;
            }
            Err(e) => return Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> ::kube::Error {
        ::kube::Error::Api(Box::new(::kube::core::Status {
            code,
            message: format!("answer {code}"),
            ..Default::default()
        }))
    }

    #[test]
    fn throttling_and_server_errors_are_retried_and_conflicts_are_not() {
        for code in [429, 500, 503, 504] {
            assert!(is_transient(&api_error(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!is_transient(&api_error(code)), "{code}");
        }
        assert_eq!(status_code(&api_error(409)), Some(409));
        assert_eq!(describe(&api_error(404)), "answer 404 (HTTP 404)");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_transient_error_is_retried_a_bounded_number_of_times() {
        let bucket = TokenBucket::new(0.0, 1);
        let policy = RetryPolicy {
            max_attempts: 4,
            backoff: std::time::Duration::from_millis(1),
            max_backoff: std::time::Duration::from_millis(2),
        };
        let mut calls = 0;
        let out: Result<(), _> = with_retry(&bucket, &policy, || {
            calls += 1;
            async { Err(api_error(503)) }
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls, policy.max_attempts);
        let mut calls = 0;
        let out = with_retry(&bucket, &policy, || {
            calls += 1;
            let n = calls;
            async move { if n < 3 { Err(api_error(429)) } else { Ok(n) } }
        })
        .await;
        assert_eq!(out.ok(), Some(3));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_closed_gate_stops_the_next_attempt_and_sends_nothing_more() {
        let bucket = TokenBucket::new(0.0, 1);
        let policy = RetryPolicy::default();
        let open = std::sync::atomic::AtomicBool::new(true);
        let gate = || open.load(std::sync::atomic::Ordering::Relaxed);
        let mut calls = 0;
        let out: Option<Result<(), _>> = with_retry_gated(&bucket, &policy, &gate, || {
            calls += 1;
            // The first attempt fails transiently; the gate closes during its backoff.
            open.store(false, std::sync::atomic::Ordering::Relaxed);
            async { Err(api_error(503)) }
        })
        .await;
        assert!(out.is_none());
        assert_eq!(calls, 1);
        let mut calls = 0;
        let closed: Option<Result<(), ::kube::Error>> =
            with_retry_gated(&bucket, &policy, &|| false, || {
                calls += 1;
                async { Ok(()) }
            })
            .await;
        assert!(closed.is_none());
        assert_eq!(calls, 0, "a gate closed from the start sends nothing");
    }
}
