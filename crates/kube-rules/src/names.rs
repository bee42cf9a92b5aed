//! The API server's rules for object names (RFC 1123 labels and subdomains).

pub const MAX_DNS_LABEL: usize = 63;
pub const MAX_DNS_SUBDOMAIN: usize = 253;

/// RFC 1123 label: what the API server demands of namespace, Job and container names.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_DNS_LABEL
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what the API server demands of most object names (PVs, service accounts).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_DNS_SUBDOMAIN && s.split('.').all(is_dns_label)
}
