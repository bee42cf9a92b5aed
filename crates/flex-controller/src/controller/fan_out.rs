//! One watch feeding several controllers: the claim and volume controllers both react to
//! PVs and to our Jobs, and a second watch of each would double the API load and the cache.
//!
//! Why not kube-runtime's shared streams (`reflector::store_shared`, `for_shared_stream`,
//! `watches_shared_stream`): with them the end-to-end burst of 200 claims stalled and did
//! not bind within its time limit, while this fan-out binds it. Their dispatcher awaits every
//! subscriber before the watch goes on, and it passes on listed and changed objects but not
//! deletions. Until that is understood and fixed upstream or here, this fan-out stays.

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Future, Stream, StreamExt};
use kube::runtime::watcher;

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
    let channels: [_; N] = std::array::from_fn(|_| mpsc::unbounded::<K>());
    let senders: Vec<_> = channels.iter().map(|(tx, _)| tx.clone()).collect();
    let triggers = channels.map(|(_, rx)| rx.map(Ok).boxed());
    let drive = async move {
        let mut source = std::pin::pin!(source);
        while let Some(item) = source.next().await {
            match item {
                Ok(obj) => {
                    for tx in &senders {
                        // A closed receiver means its controller stopped; the others go on.
                        let _ = tx.unbounded_send(obj.clone());
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
}
