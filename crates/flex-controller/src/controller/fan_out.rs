//! One watch feeding several consumers: the claim and volume controllers both react to PVs
//! and to our Jobs (and the orphan check to Jobs), and a second watch of each would double
//! the API load and the cache. Every watch is handed on this way, to one consumer or more,
//! so the watch is polled by a task of its own (`wiring.rs`) and a consumer only reads
//! queues.
//!
//! The watch never waits for a consumer. Each consumer has a queue of the objects that
//! changed since it last looked, one entry per object holding its latest version (as
//! client-go's work queue does), so the queue is bounded by the number of objects watched,
//! not by the rate of changes. With bounded channels a consumer that waits for every cache
//! to be ready (the orphan check) held up the initial list that readiness waits for: a
//! restart with more of our Jobs than a channel held never became ready.
//!
//! Why not kube-runtime's shared streams (`reflector::store_shared`, `for_shared_stream`):
//! their dispatcher passes on listed and changed objects but not deletions (kube-runtime
//! 5.0, `Writer::dispatch_event`), and a Job's or PV's deletion must reach the claim it
//! names; and it awaits every subscriber's buffer before the watch goes on.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures::stream::BoxStream;
use futures::task::AtomicWaker;
use futures::{Future, Stream, StreamExt};
use kube::Resource;
use kube::runtime::watcher;

/// An object's identity in a queue: namespace and name.
type Key = (Option<String>, String);

/// What one consumer has not seen yet: the keys in the order they first changed, and the
/// latest version of each.
struct State<K> {
    order: VecDeque<Key>,
    latest: HashMap<Key, Arc<K>>,
    /// The watch ended: once drained, the consumer's stream ends too.
    closed: bool,
}

struct Queue<K> {
    state: Mutex<State<K>>,
    waker: AtomicWaker,
}

impl<K> Queue<K> {
    fn new() -> Self {
        Queue {
            state: Mutex::new(State {
                order: VecDeque::new(),
                latest: HashMap::new(),
                closed: false,
            }),
            waker: AtomicWaker::new(),
        }
    }

    fn push(&self, key: Key, object: Arc<K>) {
        {
            let mut s = crate::lock(&self.state);
            if s.latest.insert(key.clone(), object).is_none() {
                s.order.push_back(key);
            }
        }
        self.waker.wake();
    }

    fn close(&self) {
        crate::lock(&self.state).closed = true;
        self.waker.wake();
    }

    fn pop(&self) -> Poll<Option<Arc<K>>> {
        let mut s = crate::lock(&self.state);
        if let Some(key) = s.order.pop_front() {
            return Poll::Ready(s.latest.remove(&key));
        }
        if s.closed {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

/// `N` trigger streams that each see every object `source` yields (its latest version,
/// once per change they have not read yet), and the future that drives `source` (it must
/// be polled for as long as the triggers are used). Driving never waits for a trigger.
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
    K: Resource + Clone + Send + Sync + 'static,
{
    let queues: [Arc<Queue<K>>; N] = std::array::from_fn(|_| Arc::new(Queue::new()));
    let triggers = queues.clone().map(|q| {
        futures::stream::poll_fn(move |cx| {
            // Registered before looking, so a push in between wakes this task.
            q.waker.register(cx.waker());
            // The last consumer to read a version takes it without a copy.
            q.pop().map(|o| o.map(|o| Ok(Arc::unwrap_or_clone(o))))
        })
        .boxed()
    });
    let drive = async move {
        let mut source = std::pin::pin!(source);
        while let Some(item) = source.next().await {
            match item {
                Ok(obj) => {
                    let key = (obj.meta().namespace.clone(), obj.meta().name.clone());
                    let key = (key.0, key.1.unwrap_or_default());
                    let obj = Arc::new(obj);
                    for q in &queues {
                        // A consumer that is gone (its controller stopped) is not fed.
                        if Arc::strong_count(q) > 1 {
                            q.push(key.clone(), obj.clone());
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "watch failed; it restarts with backoff"),
            }
        }
        for q in &queues {
            q.close();
        }
    };
    (triggers, drive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, version: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(version.into());
        c
    }

    fn names(seen: &[ConfigMap]) -> Vec<(String, String)> {
        seen.iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap(),
                    c.metadata.resource_version.clone().unwrap(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn every_trigger_sees_every_object_and_errors_are_not_repeated() {
        let source = futures::stream::iter(vec![
            Ok(cm("a", "1")),
            Err(watcher::Error::NoResourceVersion),
            Ok(cm("b", "2")),
        ]);
        let ([a, b], drive) = fan_out::<ConfigMap, 2>(source);
        drive.await;
        let a: Vec<_> = a.map(|r| r.unwrap()).collect().await;
        let b: Vec<_> = b.map(|r| r.unwrap()).collect().await;
        let want = [("a".to_string(), "1".to_string()), ("b".into(), "2".into())];
        assert_eq!(names(&a), want);
        assert_eq!(names(&b), want);
    }

    /// What a restart sees: tens of thousands of objects listed while a consumer waits for
    /// readiness before it reads anything. The watch goes through all of them at once.
    #[tokio::test]
    async fn a_trigger_that_is_not_read_never_holds_the_watch_back() {
        let n = 20_000;
        let source = futures::stream::iter((0..n).map(|i| Ok(cm(&format!("o{i}"), "1"))));
        let ([a, b], drive) = fan_out::<ConfigMap, 2>(source);
        tokio::time::timeout(std::time::Duration::from_secs(30), drive)
            .await
            .expect("the watch is never held back by an unread trigger");
        assert_eq!(a.count().await, n);
        assert_eq!(b.count().await, n);
    }

    /// An object that changes again before its consumer looked is queued once, as its
    /// latest version, in the place of its first change.
    #[tokio::test]
    async fn repeated_changes_of_an_object_are_queued_once_as_the_latest_version() {
        let source = futures::stream::iter(
            [cm("a", "1"), cm("b", "2"), cm("a", "3"), cm("a", "4")]
                .into_iter()
                .map(Ok),
        );
        let ([a], drive) = fan_out::<ConfigMap, 1>(source);
        drive.await;
        let seen: Vec<_> = a.map(|r| r.unwrap()).collect().await;
        assert_eq!(
            names(&seen),
            [("a".to_string(), "4".to_string()), ("b".into(), "2".into())]
        );
    }

    /// A consumer reading while the watch goes on is woken for each change it has not seen.
    #[tokio::test]
    async fn a_waiting_trigger_is_woken_by_a_change() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let ([mut a], drive) = fan_out::<ConfigMap, 1>(rx);
        let driving = tokio::spawn(drive);
        let reader = tokio::spawn(async move { a.next().await.map(|r| r.unwrap()) });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        tx.unbounded_send(Ok(cm("late", "9"))).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), reader)
            .await
            .expect("the reader is woken")
            .unwrap()
            .unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some("late"));
        drop(tx);
        driving.await.unwrap();
    }
}
