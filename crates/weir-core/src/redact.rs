//! What logs, metrics and error records may say about configured endpoints that carry
//! credentials: webhook URLs (tokens in their path or query, users in their
//! authority) and AWS resource ARNs (account ids, function and topic names).
//!
//! Every message built from such a value shows [`url`] or [`arn`] of it instead, and
//! errors from libraries that quote the value (HTTP clients, AWS SDK service errors)
//! pass through [`scrub`] first.

/// `scheme://host[:port]/…`: the URL without user, path, query or fragment.
pub fn url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else { return "(a URL)".into() };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let more = rest.len() > authority.len() || host.len() < authority.len();
    format!("{scheme}://{host}{}", if more { "/…" } else { "" })
}

/// `arn:partition:service:region:…`: the ARN without account and resource; a value
/// that is not an ARN (a bare function name) is shown as `…`.
pub fn arn(text: &str) -> String {
    let parts: Vec<&str> = text.splitn(5, ':').collect();
    match parts.as_slice() {
        ["arn", partition, service, region, _] => format!("arn:{partition}:{service}:{region}:…"),
        _ => "…".into(),
    }
}

/// `message` with every occurrence of `secret` replaced by `shown`.
pub fn scrub(message: &str, secret: &str, shown: &str) -> String {
    if secret.is_empty() { message.to_owned() } else { message.replace(secret, shown) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_only_scheme_and_host() {
        assert_eq!(url("https://hooks.slack.com/services/T0/B0/XYZ"), "https://hooks.slack.com/…");
        assert_eq!(url("http://127.0.0.1:8080/hook?token=abc"), "http://127.0.0.1:8080/…");
        assert_eq!(url("https://user:pass@example.com"), "https://example.com/…");
        assert_eq!(url("https://example.com"), "https://example.com");
        assert_eq!(url("not a url token=abc"), "(a URL)");
    }

    #[test]
    fn arns_keep_only_partition_service_and_region() {
        assert_eq!(arn("arn:aws:lambda:eu-west-1:123456789012:function:enrich:live"), "arn:aws:lambda:eu-west-1:…");
        assert_eq!(arn("arn:aws:sns:us-east-1:123456789012:alerts"), "arn:aws:sns:us-east-1:…");
        assert_eq!(arn("my-function"), "…");
    }

    #[test]
    fn scrub_replaces_every_occurrence() {
        let m = "Function not found: arn:aws:lambda:x:1:function:f (arn:aws:lambda:x:1:function:f)";
        assert_eq!(scrub(m, "arn:aws:lambda:x:1:function:f", "…"), "Function not found: … (…)");
        assert_eq!(scrub("unchanged", "", "…"), "unchanged");
    }
}
