//! The API server's rules for object names (RFC 1123 labels and subdomains).

pub const MAX_DNS_LABEL: usize = 63;
pub const MAX_DNS_SUBDOMAIN: usize = 253;

/// RFC 1123 label: what the API server demands of namespace, Job and container names.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= MAX_DNS_LABEL && label_chars(s)
}

/// A label's characters, at any length: lowercase alphanumerics and '-', alphanumeric at
/// both ends.
fn label_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what the API server demands of most object names (PVs, service accounts).
/// Its dot-separated parts follow a label's characters, but only the whole name is limited
/// in length (253), as the API server's `IsDNS1123Subdomain` has it: a node or class named
/// with a part longer than 63 characters exists.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_DNS_SUBDOMAIN && s.split('.').all(label_chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subdomain_is_limited_as_a_whole_and_a_label_by_itself() {
        let long_part = format!("{}.example", "a".repeat(64));
        assert!(is_dns_subdomain(&long_part), "the API server accepts it");
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain(&"a".repeat(253)));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        for bad in [
            "", "a..b", ".a", "a.", "-a.b", "a-.b", "A.b", "a/b", "../x", "a_b", "a b",
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        assert!(is_dns_subdomain("node-1.zone-a.example"));
    }
}
