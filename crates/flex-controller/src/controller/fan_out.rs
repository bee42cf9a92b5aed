//! One watch feeding several controllers: the claim and volume controllers both react to
//! PVs and to our Jobs, and a second watch of each would double the API load and the cache.
//!
//! Why not kube-runtime's shared streams (`reflector::store_shared`, `for_shared_stream`,
//! `watches_shared_stream`): with them the end-to-end burst of 200 claims stalled and did
//! not bind within its time limit, while this fan-out binds it. Their dispatcher awaits every
//! subscriber before the watch goes on, and it passes on listed and changed objects but not
//! deletions. Until that is understood and fixed upstream or here, this fan-out stays.
//!
//! The channels are bounded: a controller that falls behind holds the watch back (as
//! kube-runtime's own streams do) instead of an unbounded queue growing in memory.

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Future, SinkExt, Stream, StreamExt};
use kube::runtime::watcher;

/// Objects each trigger stream holds before the watch waits for it.
const BUFFERED: usize = 256;

/// `N` trigger streams that each see every object `source` yields, and the future that
/// drives `source` (it must be polled for as long as the triggers are used).
///
/// Watch errors are logged here rather than passed on: the watcher already retries with
/// backoff, and handing the same error to every controller would only repeat it.
pub(super) fn fan_out<K, const N: usize>(
    source: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) -> (
    [BoxStream<'static, Result<K, watcher::Error>>; N],
    impl Future<Output = ()> + Send + 'static,
)
where
    K: Clone + Send + 'static,
{
    let channels: [_; N] = std::array::from_fn(|_| mpsc::channel::<K>(BUFFERED));
    let mut senders: Vec<_> = channels.iter().map(|(tx, _)| tx.clone()).collect();
    let triggers = channels.map(|(_, rx)| rx.map(Ok).boxed());
    let drive = async move {
        let mut source = std::pin::pin!(source);
        while let Some(item) = source.next().await {
            match item {
                Ok(obj) => {
                    for tx in &mut senders {
                        // A closed receiver means its controller stopped; the others go on.
                        let _ = tx.send(obj.clone()).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "watch failed; it restarts with backoff"),
            }
        }
    };
    (triggers, drive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_trigger_sees_every_object_and_errors_are_not_repeated() {
        let source =
            futures::stream::iter(vec![Ok(1), Err(watcher::Error::NoResourceVersion), Ok(2)]);
        let ([a, b], drive) = fan_out::<i32, 2>(source);
        drive.await;
        let a: Vec<_> = a.map(|r| r.unwrap()).collect().await;
        let b: Vec<_> = b.map(|r| r.unwrap()).collect().await;
        assert_eq!(a, [1, 2]);
        assert_eq!(b, [1, 2]);
    }

    #[tokio::test]
    async fn a_trigger_that_is_not_read_holds_the_watch_back_instead_of_queueing() {
        let source = futures::stream::iter((0..10_000).map(Ok));
        let ([a, _b], drive) = fan_out::<i32, 2>(source);
        let driving = tokio::spawn(drive);
        // `_b` is never read: the watch stops after what the channels hold.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!driving.is_finished());
        let seen = a.take(BUFFERED).count().await;
        assert_eq!(seen, BUFFERED);
        driving.abort();
    }
}
