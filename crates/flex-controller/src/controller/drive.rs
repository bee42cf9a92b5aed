//! The one loop every reconciler decides in: plan, read what the plan asks for, plan again.

use std::future::Future;

use flex_core::plan::{Ask, Decision};

/// A reconciler's decision: its planner, and how it reads what the planner asks for.
pub(super) trait Pipeline: Sync {
    /// What the planner asked for, once read.
    type Read: Send;
    type Plan;
    fn plan(&self, read: &Self::Read) -> Decision<Self::Plan>;
    /// Reads (or computes) what `ask` asks for into `read`; `false`: it cannot be met (the
    /// object is gone, or nothing can be prepared).
    fn answer(
        &self,
        ask: &Ask,
        read: &mut Self::Read,
    ) -> impl Future<Output = crate::Result<bool>> + Send;
}

/// What a reconciler decides from: what it gathered from the caches, and the context to
/// read the rest with.
pub(super) struct Deciding<'a, G> {
    pub g: &'a G,
    pub ctx: &'a super::context::Context,
}

/// Plans from `read`; while the planner asks, the pipeline reads what it asks for and the
/// planner is asked again. Each ask is answered at most once: an ask answered before, or
/// one that cannot be met, ends the loop with that ask, and the object waits for its next
/// change.
pub(super) async fn decide<P: Pipeline>(
    p: &P,
    read: &mut P::Read,
) -> crate::Result<Decision<P::Plan>> {
    let mut answered: Vec<Ask> = Vec::new();
    loop {
        let ask = match p.plan(read) {
            Ok(plan) => return Ok(Ok(plan)),
            Err(ask) => ask,
        };
        if answered.contains(&ask) || !p.answer(&ask, read).await? {
            return Ok(Err(ask));
        }
        answered.push(ask);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asks for the record until it has it, then for the claim forever; `meets` says
    /// whether an ask can be met.
    struct Asking {
        meets: bool,
    }

    impl Pipeline for Asking {
        type Read = Vec<Ask>;
        type Plan = ();
        fn plan(&self, read: &Vec<Ask>) -> Decision<()> {
            match read.as_slice() {
                [] => Err(Ask::Record),
                _ => Err(Ask::Claim),
            }
        }
        async fn answer(&self, ask: &Ask, read: &mut Vec<Ask>) -> crate::Result<bool> {
            read.push(ask.clone());
            Ok(self.meets)
        }
    }

    #[tokio::test]
    async fn each_ask_is_answered_once_and_an_unmet_one_ends_the_loop() {
        let mut read = Vec::new();
        let decided = decide(&Asking { meets: true }, &mut read).await.unwrap();
        assert_eq!(decided, Err(Ask::Claim));
        assert_eq!(read, vec![Ask::Record, Ask::Claim], "each asked once");
        let mut read = Vec::new();
        let unmet = decide(&Asking { meets: false }, &mut read).await.unwrap();
        assert_eq!(unmet, Err(Ask::Record));
        assert_eq!(read, vec![Ask::Record], "not asked again");
    }
}
