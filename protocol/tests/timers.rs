//! The timer thread behind libp2p's timeouts (`futures-timer`, patched in vendor/): it sleeps
//! toward its earliest deadline and is woken only for a timer due before it, so every timer
//! must still fire on time whatever the thread is sleeping toward, however many timers were
//! dropped, and with timers made on many threads at once.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use futures_timer::Delay;

/// How late a timer may fire on a busy test machine. Far less than the long deadlines below,
/// so a timer that waited for them fails.
const SLACK: Duration = Duration::from_millis(1500);

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to its end on this thread.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Arc::new(Unpark(thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

/// Waits for a timer of `dur` and returns how long it took.
fn time(dur: Duration) -> Duration {
    let start = Instant::now();
    block_on(Delay::new(dur));
    start.elapsed()
}

/// One test, so that each part finds the timer thread in the state the part before left it.
#[test]
fn timers_fire_at_their_deadline_whatever_the_timer_thread_sleeps_toward() {
    // The thread sleeps toward a timer ten seconds away; a shorter one made afterwards wakes it.
    let long = Delay::new(Duration::from_secs(10));
    thread::sleep(Duration::from_millis(50));
    let took = time(Duration::from_millis(100));
    assert!(took >= Duration::from_millis(100), "fired early: {took:?}");
    assert!(took < Duration::from_millis(100) + SLACK, "fired late: {took:?}");

    // A timer reset to sooner than the deadline the thread sleeps toward fires then.
    let mut reset = Delay::new(Duration::from_secs(10));
    thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    reset.reset(Duration::from_millis(100));
    block_on(&mut reset);
    let took = start.elapsed();
    assert!((Duration::from_millis(100)..Duration::from_millis(100) + SLACK).contains(&took), "reset: {took:?}");

    // Ten thousand timers dropped without waking the thread (it finds them when it wakes);
    // the next one still fires on time, and a later one no sooner than it is due.
    for _ in 0..10_000 {
        drop(Delay::new(Duration::from_millis(200)));
    }
    let took = time(Duration::from_millis(50));
    assert!((Duration::from_millis(50)..Duration::from_millis(50) + SLACK).contains(&took), "after drops: {took:?}");
    let took = time(Duration::from_millis(300));
    assert!((Duration::from_millis(300)..Duration::from_millis(300) + SLACK).contains(&took), "later: {took:?}");

    // Timers made on eight threads at once, each one due at its own time: none is missed while
    // another thread's update races the timer thread going to sleep.
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            thread::spawn(move || {
                let mut worst = Duration::ZERO;
                for i in 0..40u64 {
                    let dur = Duration::from_millis((t * 7 + i * 13) % 60);
                    let took = time(dur);
                    assert!(took >= dur, "thread {t} timer {i}: {took:?} before {dur:?}");
                    worst = worst.max(took - dur);
                }
                worst
            })
        })
        .collect();
    for (t, thread) in threads.into_iter().enumerate() {
        let worst = thread.join().expect("a timer thread panicked");
        assert!(worst < SLACK, "thread {t}: a timer fired {worst:?} late");
    }
    drop(long);
}
