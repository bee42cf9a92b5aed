//! Fault injection for tests: fail or delay chosen requests, close every open watch.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

/// What a matching request gets instead of its normal answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// An error status; 429 answers carry `Retry-After`.
    Status { code: u16, retry_after: Option<u64> },
    /// The normal answer, late.
    Delay(Duration),
}

#[derive(Debug)]
struct Rule {
    verb: Option<String>,
    resource: Option<String>,
    remaining: u32,
    fault: Fault,
}

/// Shared by the HTTP front end and the tests.
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    watch_epoch: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            watch_epoch: watch::channel(0).0,
        }
    }
}

impl Faults {
    /// The next `count` requests matching `verb` (get, list, watch, create, update, patch,
    /// delete; `None` for any) on `resource` (plural, e.g. `persistentvolumes`; `None` for
    /// any) get `fault`.
    pub fn inject(&self, verb: Option<&str>, resource: Option<&str>, count: u32, fault: Fault) {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Rule {
                verb: verb.map(str::to_owned),
                resource: resource.map(str::to_owned),
                remaining: count,
                fault,
            });
    }

    pub fn fail_next(&self, verb: Option<&str>, resource: Option<&str>, count: u32, code: u16) {
        let retry_after = (code == 429).then_some(1);
        self.inject(verb, resource, count, Fault::Status { code, retry_after });
    }

    pub fn delay_next(&self, verb: Option<&str>, resource: Option<&str>, count: u32, by: Duration) {
        self.inject(verb, resource, count, Fault::Delay(by));
    }

    /// The fault for this request, if a rule matches (and uses up one of its count).
    pub fn take(&self, verb: &str, resource: &str) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.verb.as_deref().is_none_or(|v| v == verb)
                && r.resource.as_deref().is_none_or(|x| x == resource)
        })?;
        rule.remaining -= 1;
        let fault = rule.fault.clone();
        rules.retain(|r| r.remaining > 0);
        Some(fault)
    }

    /// Ends every open watch stream, as an API server restart or a load balancer would.
    pub fn close_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    pub fn watch_closer(&self) -> watch::Receiver<u64> {
        self.watch_epoch.subscribe()
    }
}
