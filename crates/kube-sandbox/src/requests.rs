//! Counts of the requests the API server serves, by client (the product of its
//! User-Agent), verb and resource, so that tests and benchmarks can tell how much load a
//! client puts on the API server (as apiserver_request_total does, by user agent).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// (verb, resource) of one client's requests.
type PerAgent = HashMap<(&'static str, Cow<'static, str>), u64>;

/// The live counts, shared by the server's connections. Recording takes one lock and, once
/// a client has made a request of that kind before, allocates nothing (but for a
/// subresource's name).
#[derive(Debug, Default)]
pub struct RequestCounter {
    counts: Mutex<HashMap<String, PerAgent>>,
}

impl RequestCounter {
    /// Counts one request. `agent` is the User-Agent up to its first '/'; `resource` the
    /// plural, with `/subresource` when there is one, or the path of a request that names
    /// no resource (discovery, `/version`).
    pub fn record(&self, agent: &str, verb: &'static str, resource: Cow<'static, str>) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let per_agent = match counts.get_mut(agent) {
            Some(p) => p,
            None => counts.entry(agent.to_owned()).or_default(),
        };
        *per_agent.entry((verb, resource)).or_default() += 1;
    }

    /// The counts so far.
    pub fn snapshot(&self) -> RequestCounts {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        RequestCounts(
            counts
                .iter()
                .flat_map(|(agent, per)| {
                    per.iter().map(move |((verb, resource), n)| {
                        (
                            (agent.clone(), (*verb).to_owned(), resource.to_string()),
                            *n,
                        )
                    })
                })
                .collect(),
        )
    }

    /// Starts counting from zero.
    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// A snapshot of the counts: (user agent product, verb, resource) -> requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts(pub BTreeMap<(String, String, String), u64>);

impl RequestCounts {
    /// One client's counts: (verb, resource) -> requests.
    pub fn by_agent(&self, agent: &str) -> BTreeMap<(String, String), u64> {
        self.0
            .iter()
            .filter(|((a, _, _), _)| a == agent)
            .map(|((_, verb, resource), n)| ((verb.clone(), resource.clone()), *n))
            .collect()
    }

    /// How many requests of that client, verb and resource.
    pub fn get(&self, agent: &str, verb: &str, resource: &str) -> u64 {
        self.0
            .get(&(agent.to_owned(), verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// All of one client's requests.
    pub fn total(&self, agent: &str) -> u64 {
        self.0
            .iter()
            .filter(|((a, _, _), _)| a == agent)
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_agent_verb_and_resource() {
        let c = RequestCounter::default();
        c.record("a", "list", Cow::Borrowed("pods"));
        c.record("a", "list", Cow::Borrowed("pods"));
        c.record("a", "update", Cow::Owned("pods/status".into()));
        c.record("b", "list", Cow::Borrowed("pods"));
        let s = c.snapshot();
        assert_eq!(s.get("a", "list", "pods"), 2);
        assert_eq!(s.get("a", "update", "pods/status"), 1);
        assert_eq!(s.get("a", "update", "pods"), 0);
        assert_eq!(s.total("a"), 3);
        assert_eq!(
            s.by_agent("b"),
            BTreeMap::from([(("list".to_owned(), "pods".to_owned()), 1)])
        );
        c.reset();
        assert_eq!(c.snapshot(), RequestCounts::default());
    }
}
