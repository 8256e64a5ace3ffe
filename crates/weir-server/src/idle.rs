//! Idle connections give their planner state back: a session's DataFusion
//! context (function registries, catalog providers: about 100 KiB with the
//! allocator's overhead) is dropped once the connection has run nothing
//! for [`IDLE_RELEASE`] to twice that, and made again by its next
//! statement. So thousands of pooled connections that ran statements once
//! cost little more than ones that never did.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Mutex;

use crate::session::Session;

/// How long a connection runs nothing before its context is dropped (it
/// is checked this often).
pub const IDLE_RELEASE: Duration = Duration::from_secs(5);

/// Watches the session in `slot` while the connection lives (until the
/// slot is dropped) and releases its context when it idles.
pub fn watch(slot: &Arc<Mutex<Option<Session>>>) {
    let slot = Arc::downgrade(slot);
    tokio::spawn(async move {
        let mut seen = None;
        loop {
            tokio::time::sleep(IDLE_RELEASE).await;
            if !check(&slot, &mut seen) {
                return;
            }
        }
    });
}

/// One check: releases the context if no statement ran since the last
/// (`seen`); false once the connection is gone.
fn check(slot: &Weak<Mutex<Option<Session>>>, seen: &mut Option<u64>) -> bool {
    let Some(slot) = slot.upgrade() else {
        return false;
    };
    // A busy session (a statement holds it) is not idle.
    let Ok(mut guard) = slot.try_lock() else {
        *seen = None;
        return true;
    };
    let Some(session) = guard.as_mut() else {
        return true;
    };
    let ran = session.statements_run;
    if *seen == Some(ran) && session.release_context() {
        session.db.contexts_released.fetch_add(1, Ordering::Relaxed);
        drop(guard);
        trim_heap_soon();
    }
    *seen = Some(ran);
    true
}

/// Hands the freed memory back to the system (glibc keeps freed small
/// allocations in its arenas otherwise) a second after a context is
/// released: the contexts that idle sessions release within that second
/// are trimmed together, and every release is followed by a trim.
fn trim_heap_soon() {
    static PENDING: AtomicBool = AtomicBool::new(false);
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        PENDING.store(false, Ordering::Release);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free pages to the kernel; it
        // takes the allocator's own locks.
        unsafe {
            libc::malloc_trim(0);
        }
    });
}
