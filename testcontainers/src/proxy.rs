//! A TCP proxy between ZooKeeper clients and servers that can fake network faults.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Rewrites the first message a client sends on a connection before any byte of it reaches
/// the server: given the bytes read so far, `None` asks for more, `Some(bytes)` is what to
/// send in their place (the rest of the stream is relayed as it is).
pub(crate) type FirstMessage = fn(&[u8]) -> Option<Vec<u8>>;

/// What the proxy currently does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Copy bytes both ways.
    Forward,
    /// Copy nothing, keep every socket open.
    Blackhole,
    /// Copy client->server; read server->client and throw it away.
    HoldResponses,
}

/// The shared state every relay task watches.
#[derive(Debug, Clone, Copy)]
struct State {
    mode: Mode,
    /// Bumped by [`FaultProxy::cut`]: connections born in an older epoch close.
    epoch: u64,
    /// Set by [`FaultProxy::delay`]: how long each byte waits in each direction.
    delay: Duration,
}

/// A loopback TCP proxy in front of ZooKeeper servers, for injecting client-side network
/// faults.
///
/// It listens on one `127.0.0.1` port per upstream server (see
/// [`connect_string`](Self::connect_string)) and relays each accepted connection to that
/// server. The fault methods take effect immediately, also in the middle of a stream:
///
/// * [`blackhole`](Self::blackhole): a network partition. Nothing is relayed, no socket is
///   closed (no FIN, no RST); new connections are accepted but never reach the server.
/// * [`hold_responses`](Self::hold_responses): requests reach the server, answers never
///   reach the client.
/// * [`cut`](Self::cut): every current connection is closed (the client reads EOF).
/// * [`heal`](Self::heal): back to normal.
/// * [`delay`](Self::delay): a fixed latency in each direction (a long link), which keeps
///   pipelined requests pipelined.
///
/// Dropping the proxy stops it and closes all its sockets. It must be created inside a
/// tokio runtime, whose tasks do the relaying.
#[derive(Debug)]
pub struct FaultProxy {
    state: watch::Sender<State>,
    listen_addrs: Vec<SocketAddr>,
    upstreams: Vec<SocketAddr>,
    live: Arc<AtomicUsize>,
    accept_tasks: Vec<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy with one listener on `127.0.0.1` (on a port the OS picks) per
    /// upstream address, in the same order.
    pub async fn start(upstreams: Vec<SocketAddr>) -> io::Result<FaultProxy> {
        FaultProxy::start_rewriting(upstreams.into_iter().map(|u| (u, None)).collect()).await
    }

    /// [`start`](Self::start), with a rewrite of the first message of every connection to
    /// each upstream that has one.
    pub(crate) async fn start_rewriting(
        upstreams: Vec<(SocketAddr, Option<FirstMessage>)>,
    ) -> io::Result<FaultProxy> {
        let (state, _) = watch::channel(State {
            mode: Mode::Forward,
            epoch: 0,
            delay: Duration::ZERO,
        });
        let live = Arc::new(AtomicUsize::new(0));
        let mut listen_addrs = Vec::with_capacity(upstreams.len());
        let mut accept_tasks = Vec::with_capacity(upstreams.len());
        for &(upstream, first) in &upstreams {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
            listen_addrs.push(listener.local_addr()?);
            accept_tasks.push(tokio::spawn(accept_loop(
                listener,
                upstream,
                first,
                state.subscribe(),
                live.clone(),
            )));
        }
        Ok(FaultProxy {
            state,
            listen_addrs,
            upstreams: upstreams.into_iter().map(|(u, _)| u).collect(),
            live,
            accept_tasks,
        })
    }

    /// The proxy's addresses as a ZooKeeper connect string
    /// (`"127.0.0.1:p1,127.0.0.1:p2,..."`), in the order of the upstreams.
    pub fn connect_string(&self) -> String {
        self.listen_addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The proxy's listening addresses, in the order of the upstreams.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listen_addrs.clone()
    }

    /// The servers this proxy relays to.
    pub fn upstreams(&self) -> Vec<SocketAddr> {
        self.upstreams.clone()
    }

    /// Partitions clients from servers: stop relaying in both directions but keep every
    /// socket open, so neither side sees a FIN or RST; bytes stay in kernel buffers.
    /// New connections are accepted but not connected to the server, so a client cannot
    /// get through by reconnecting.
    ///
    /// After [`heal`](Self::heal), blackholed connections resume where they stopped (like a
    /// healed partition), except those that were also held by
    /// [`hold_responses`](Self::hold_responses), which are closed.
    pub fn blackhole(&self) {
        self.state.send_modify(|s| s.mode = Mode::Blackhole);
    }

    /// Keeps relaying client->server, but reads and discards every server->client byte: a
    /// request reaches the server, its answer never reaches the client. Applies to new
    /// connections too. The held connections are closed by [`cut`](Self::cut) or
    /// [`heal`](Self::heal), as their streams are corrupt.
    pub fn hold_responses(&self) {
        self.state.send_modify(|s| s.mode = Mode::HoldResponses);
    }

    /// Closes every current connection (both sockets; the client reads EOF, or a reset if it
    /// had sent bytes that were never relayed). New connections are relayed normally, unless
    /// the proxy is blackholed: `cut` ends [`hold_responses`](Self::hold_responses) but
    /// keeps a [`blackhole`](Self::blackhole).
    pub fn cut(&self) {
        self.state.send_modify(|s| {
            s.epoch += 1;
            if s.mode == Mode::HoldResponses {
                s.mode = Mode::Forward;
            }
        });
    }

    /// Relays normally again. Server->client bytes discarded while holding are lost, so
    /// connections that were ever held are closed; blackholed connections resume.
    pub fn heal(&self) {
        self.state.send_modify(|s| s.mode = Mode::Forward);
    }

    /// Holds every byte relayed from now on for `one_way` in each direction before it is
    /// written on (`Duration::ZERO`, the default, relays at once): a link whose round trip
    /// is `2 × one_way` longer. Bytes are timed from when the proxy read them, so requests
    /// a client sends back to back still arrive back to back: the added time counts round
    /// trips, not requests. Applies to current connections too; bytes already waiting keep
    /// their time.
    ///
    /// ```no_run
    /// # async fn f(proxy: zkfence_testcontainers::FaultProxy) {
    /// proxy.delay(std::time::Duration::from_millis(40)); // 80 ms more per round trip
    /// # }
    /// ```
    pub fn delay(&self, one_way: Duration) {
        self.state.send_modify(|s| s.delay = one_way);
    }

    /// The number of client connections the proxy currently has open.
    pub fn connection_count(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Dropping `self.state` (after this) closes the watch channel, which ends every
        // relay task; the listeners go now.
        for t in &self.accept_tasks {
            t.abort();
        }
    }
}

/// Resolves when the sender side of the watch is gone.
async fn closed(rx: &mut watch::Receiver<State>) {
    while rx.changed().await.is_ok() {}
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    first: Option<FirstMessage>,
    mut rx: watch::Receiver<State>,
    live: Arc<AtomicUsize>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let guard = LiveGuard::new(live.clone());
                    let rx = rx.clone();
                    tokio::spawn(async move {
                        let _guard = guard;
                        relay(client, upstream, first, rx).await;
                    });
                }
                Err(e) => {
                    tracing::debug!(%e, "proxy accept failed");
                    // e.g. EMFILE: do not spin.
                    tokio::task::yield_now().await;
                }
            },
            _ = closed(&mut rx) => return,
        }
    }
}

/// Counts a live connection for as long as it exists.
struct LiveGuard(Arc<AtomicUsize>);

impl LiveGuard {
    fn new(counter: Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        LiveGuard(counter)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one direction of a connection does right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Copy,
    Stall,
    Discard,
}

/// One direction of a relayed connection, with the bytes read but not yet written.
struct Pipe {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The rewrite of the first message, until it has been gathered whole.
    first: Option<FirstMessage>,
    /// With a [`FaultProxy::delay`]: chunks read, each with when it may be written, and how
    /// much of the front one was written.
    delayed: VecDeque<(Instant, Vec<u8>)>,
    written: usize,
}

impl Pipe {
    fn new(first: Option<FirstMessage>) -> Self {
        Pipe {
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
            first,
            delayed: VecDeque::new(),
            written: 0,
        }
    }

    /// Makes one step of progress. Returns `Ok(false)` on EOF from the source. Cancel safe:
    /// it is raced against mode changes.
    async fn step(
        &mut self,
        act: Act,
        delay: Duration,
        src: &mut OwnedReadHalf,
        dst: &mut OwnedWriteHalf,
    ) -> io::Result<bool> {
        match act {
            Act::Stall => std::future::pending().await,
            Act::Discard => {
                self.start = 0;
                self.end = 0;
                self.delayed.clear();
                self.written = 0;
                Ok(src.read(&mut self.buf).await? > 0)
            }
            // Delayed bytes, once the plain buffer is empty (so order is kept when a delay
            // is set mid-stream); also drains what waits after the delay is set back to zero.
            // The guard enables at least one branch of the select. Bytes still waiting when
            // the source ends are dropped with the connection.
            Act::Copy
                if self.first.is_none()
                    && self.start == self.end
                    && (!delay.is_zero() || !self.delayed.is_empty()) =>
            {
                let due = self.delayed.front().map(|(due, _)| *due);
                // Both branches are cancel safe: a read that did not finish read nothing, a
                // write that did not finish wrote nothing, and `written` moves only after one.
                tokio::select! {
                    n = src.read(&mut self.buf), if !delay.is_zero() => {
                        let n = n?;
                        if n > 0 {
                            self.delayed.push_back((Instant::now() + delay, self.buf[..n].to_vec()));
                        }
                        Ok(n > 0)
                    }
                    () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                        let chunk = &self.delayed.front().expect("a due chunk").1;
                        let n = dst.write(&chunk[self.written..]).await?;
                        if n == 0 {
                            return Err(io::ErrorKind::WriteZero.into());
                        }
                        self.written += n;
                        if self.written == chunk.len() {
                            self.delayed.pop_front();
                            self.written = 0;
                        }
                        Ok(true)
                    }
                }
            }
            // Gathering the first message (at `buf[..end]`, nothing written yet).
            Act::Copy if self.first.is_some() => {
                if self.end == self.buf.len() {
                    // Longer than any first message the rewrite knows: relay it unchanged.
                    self.first = None;
                    return Ok(true);
                }
                let n = src.read(&mut self.buf[self.end..]).await?;
                self.end += n;
                if let Some(out) = self.first.and_then(|f| f(&self.buf[..self.end])) {
                    self.first = None;
                    if out.len() > self.buf.len() {
                        self.buf.resize(out.len(), 0);
                    }
                    self.buf[..out.len()].copy_from_slice(&out);
                    self.end = out.len();
                }
                Ok(n > 0)
            }
            Act::Copy if self.start < self.end => {
                let n = dst.write(&self.buf[self.start..self.end]).await?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                self.start += n;
                Ok(true)
            }
            Act::Copy => {
                let n = src.read(&mut self.buf).await?;
                self.start = 0;
                self.end = n;
                Ok(n > 0)
            }
        }
    }
}

/// Relays one client connection until it ends, is cut, or the proxy is dropped.
async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    first: Option<FirstMessage>,
    mut rx: watch::Receiver<State>,
) {
    let epoch = rx.borrow().epoch;
    // Held connections are corrupt: close them when the proxy heals.
    let mut held = false;
    // Do not reach the server while blackholed.
    loop {
        let s = *rx.borrow_and_update();
        if s.epoch != epoch {
            return;
        }
        if s.mode == Mode::HoldResponses {
            held = true;
        }
        if s.mode != Mode::Blackhole {
            break;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
    let server = match TcpStream::connect(upstream).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(%e, %upstream, "proxy could not reach upstream");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut up = Pipe::new(first);
    let mut down = Pipe::new(None);
    loop {
        let s = *rx.borrow_and_update();
        if s.epoch != epoch {
            break;
        }
        let (up_act, down_act) = match s.mode {
            Mode::Forward if held => break,
            Mode::Forward => (Act::Copy, Act::Copy),
            Mode::Blackhole => (Act::Stall, Act::Stall),
            Mode::HoldResponses => {
                held = true;
                (Act::Copy, Act::Discard)
            }
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { break },
            r = up.step(up_act, s.delay, &mut cr, &mut sw) => if !matches!(r, Ok(true)) { break },
            r = down.step(down_act, s.delay, &mut sr, &mut cw) => if !matches!(r, Ok(true)) { break },
        }
    }
    // Dropping the write halves sends FIN to both peers, then the sockets close.
}
