//! The rendering budget of one claim: output bytes across all of its parameters and wall
//! time, enforced while rendering so that a template and a claim's (user-sized) labels and
//! annotations cannot make the controller build huge values or loop for minutes.
//!
//! Handlebars calls our `Output` for every piece of text and our `each` for every iteration,
//! and a helper cannot see the `Output`, so the budget of the render in progress lives in a
//! thread-local: rendering is synchronous, and `Installed` puts the budget back (also when a
//! helper panics and the panic unwinds through it).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use super::limits::MAX_OUTPUT_BYTES;

/// Output bytes of all parameters and arguments of one claim together: a few parameters at
/// the per-parameter cap, far beyond what any provisioner is handed.
pub const MAX_TOTAL_OUTPUT_BYTES: usize = 256 * 1024;
/// Wall time of rendering one claim (every parameter). Real templates take microseconds;
/// this only stops a template that multiplies a claim's data (`each` in `each`).
pub const MAX_RENDER_TIME: Duration = Duration::from_millis(100);

/// Which limit a render hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// One value over `MAX_OUTPUT_BYTES`.
    Value,
    /// All values of the claim over `MAX_TOTAL_OUTPUT_BYTES`.
    Total,
    /// Over `MAX_RENDER_TIME`.
    Time,
}

impl Exceeded {
    /// The message of the template error, for the admin.
    pub fn message(self) -> String {
        match self {
            Exceeded::Value => {
                format!("the rendered value is over {MAX_OUTPUT_BYTES} bytes")
            }
            Exceeded::Total => format!(
                "the claim's rendered parameters are over {MAX_TOTAL_OUTPUT_BYTES} bytes together"
            ),
            Exceeded::Time => format!(
                "rendering took over {} ms (does the template loop over the claim's labels or annotations inside another loop?)",
                MAX_RENDER_TIME.as_millis()
            ),
        }
    }
}

/// What is left of one claim's budget. Create one per claim and hand it to every render.
#[derive(Debug, Clone)]
pub struct Budget {
    deadline: Instant,
    total_left: usize,
    tripped: Option<Exceeded>,
}

impl Budget {
    pub fn new() -> Self {
        Budget::with_limits(MAX_RENDER_TIME, MAX_TOTAL_OUTPUT_BYTES)
    }

    pub fn with_limits(time: Duration, total_bytes: usize) -> Self {
        Budget {
            deadline: Instant::now() + time,
            total_left: total_bytes,
            tripped: None,
        }
    }

    fn charge(&mut self, bytes: usize) -> Result<(), Exceeded> {
        if let Some(e) = self.tripped {
            return Err(e);
        }
        let result = if bytes > self.total_left {
            Err(Exceeded::Total)
        } else if Instant::now() > self.deadline {
            Err(Exceeded::Time)
        } else {
            self.total_left -= bytes;
            Ok(())
        };
        self.tripped = result.err();
        result
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// The budget installed for the render in progress on this thread; gives it back on drop.
pub struct Installed<'a> {
    slot: &'a mut Budget,
}

impl<'a> Installed<'a> {
    pub fn new(budget: &'a mut Budget) -> Self {
        CURRENT.with(|c| *c.borrow_mut() = Some(budget.clone()));
        Installed { slot: budget }
    }
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        if let Some(b) = CURRENT.with(|c| c.borrow_mut().take()) {
            *self.slot = b;
        }
    }
}

/// Spends `bytes` (0 to only check the clock) of the render in progress. Outside a render
/// (a helper called by another registry) there is nothing to charge.
pub fn charge(bytes: usize) -> Result<(), Exceeded> {
    CURRENT.with(|c| match c.borrow_mut().as_mut() {
        Some(b) => b.charge(bytes),
        None => Ok(()),
    })
}

/// The limit the render in progress hit, if any (to tell it apart from other errors).
pub fn tripped() -> Option<Exceeded> {
    CURRENT.with(|c| c.borrow().as_ref().and_then(|b| b.tripped))
}

/// An output that refuses to grow past `MAX_OUTPUT_BYTES` or the claim's budget, so
/// rendering stops as soon as the budget is spent rather than after building the value.
#[derive(Default)]
pub struct Budgeted {
    pub text: String,
    pub exceeded: Option<Exceeded>,
}

impl handlebars::Output for Budgeted {
    fn write(&mut self, seg: &str) -> std::io::Result<()> {
        let result = if self.text.len().saturating_add(seg.len()) > MAX_OUTPUT_BYTES {
            Err(Exceeded::Value)
        } else {
            charge(seg.len())
        };
        match result {
            Ok(()) => {
                self.text.push_str(seg);
                Ok(())
            }
            Err(e) => {
                self.exceeded = Some(e);
                Err(std::io::Error::other(e.message()))
            }
        }
    }
}

/// Marks the render in progress as over a limit a helper found before building its value.
pub fn trip(e: Exceeded) {
    CURRENT.with(|c| {
        if let Some(b) = c.borrow_mut().as_mut() {
            b.tripped.get_or_insert(e);
        }
    });
}
