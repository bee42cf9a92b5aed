//! One gate that opens when every reflector store has had its first full list, and that
//! wakes every task waiting on it.
//!
//! kube-runtime's `Store::wait_until_ready` is built on a oneshot channel whose receiver
//! keeps a single waker: when several tasks wait on the same store, only the one that polled
//! last is woken and the others wait forever. Every reconcile and the `/readyz` handler used
//! to wait on the stores directly, so after a restart in a populated cluster the reconciles
//! started by the initial lists (and readiness itself) never resumed. Here exactly one
//! future waits on the stores, and everyone else waits on a `watch` channel, which wakes
//! all of its receivers. kube-runtime's controllers wait on their own stores too: they run
//! in this future's task (`wiring.rs`).

use futures::future::BoxFuture;
use tokio::sync::watch;

pub struct Readiness {
    tx: watch::Sender<bool>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            tx: watch::channel(false).0,
        }
    }
}

impl Readiness {
    /// Returns once every store has synced (at once when they already have), so decisions
    /// never rest on a half-filled cache (a class that "does not exist" only because it was
    /// not listed yet).
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`, so this only returns once ready.
        let _ = rx.wait_for(|ready| *ready).await;
    }

    /// Waits for each store's first list, then opens the gate. This must be the only
    /// future that waits on these stores (see the module's note).
    pub async fn open_when_synced(&self, stores: Vec<BoxFuture<'static, ()>>) {
        for store in stores {
            store.await;
        }
        self.tx.send_replace(true);
        tracing::info!("caches synced; the controller is ready");
    }
}

/// The readiness future of one store, for `Readiness::open_when_synced`.
pub fn synced<K>(store: kube::runtime::reflector::Store<K>) -> BoxFuture<'static, ()>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    Box::pin(async move {
        // An error means the writer was dropped: the controller is stopping anyway.
        let _ = store.wait_until_ready().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use std::sync::Arc;
    use std::time::Duration;

    /// Many tasks wait on the gate before the store lists; every one of them resumes.
    #[tokio::test]
    async fn every_waiter_is_woken_when_the_stores_sync() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let gate = Arc::new(Readiness::default());
        let waiters: Vec<_> = (0..20)
            .map(|_| {
                let g = gate.clone();
                tokio::spawn(async move { g.wait().await })
            })
            .collect();
        let opener = {
            let g = gate.clone();
            tokio::spawn(async move { g.open_when_synced(vec![synced(store)]).await })
        };
        // Let every waiter register before the list completes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!*gate.tx.borrow());
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        tokio::time::timeout(Duration::from_secs(5), async {
            opener.await.unwrap();
            for w in waiters {
                w.await.unwrap();
            }
        })
        .await
        .expect("every waiter resumes once the store has synced");
        assert!(*gate.tx.borrow());
    }
}
