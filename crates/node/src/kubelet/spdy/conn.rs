//! The server side of a SPDY/3.1 connection, as the kubelet's (moby/spdystream) behaves: the
//! peer opens streams (odd ids) with SYN_STREAM; each comes out of [`Connection::accept`] to be
//! answered with [`Stream::reply`] or [`Stream::reset`]; DATA goes to the stream it names, FIN
//! and RST_STREAM end it; PINGs from the peer are echoed; GOAWAY stops new streams.
//!
//! Flow control as spdystream does it: the peer's windows (SETTINGS, WINDOW_UPDATE) are not
//! enforced on what this side sends, since kube-apiserver's spdystream never opens them
//! again; what this side receives is acknowledged with WINDOW_UPDATEs (stream and session)
//! once the consumer has taken it, so a peer that does enforce windows never stalls, and the
//! consumer's pace bounds what is buffered.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::frame::{Decoder, Encoder, Frame, FrameError, Headers, goaway, header, rst};

/// DATA chunks a stream buffers before the connection's reader waits for its consumer.
const STREAM_BUFFER: usize = 32;
/// How long closing waits for the peer to close the connection after this side's GOAWAY.
const LINGER: Duration = Duration::from_secs(5);

enum Out {
    Frame(Frame),
    /// Sends GOAWAY naming the last stream the peer opened.
    GoAway,
    /// Flushes and shuts the write side down.
    Shutdown,
}

/// A stream the peer opened.
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    data: mpsc::Receiver<Bytes>,
    out: mpsc::Sender<Out>,
    /// Set when the peer reset the stream: nothing more is sent on it.
    reset: Arc<AtomicBool>,
}

/// Writes to a stream; cloneable, so one task can read a stream while another writes it.
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::Sender<Out>,
    reset: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("SPDY stream {0} is closed")]
pub struct StreamClosed(pub u32);

impl Stream {
    /// A header's value, by its lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Accepts the stream (SYN_REPLY without headers, as the kubelet answers).
    pub async fn reply(&self) -> Result<(), StreamClosed> {
        let f = Frame::SynReply {
            stream: self.id,
            fin: false,
            headers: Vec::new(),
        };
        self.out
            .send(Out::Frame(f))
            .await
            .map_err(|_| StreamClosed(self.id))
    }

    /// Refuses or aborts the stream.
    pub async fn reset(&self, status: u32) {
        self.reset.store(true, Ordering::Relaxed);
        let f = Frame::RstStream {
            stream: self.id,
            status,
        };
        let _ = self.out.send(Out::Frame(f)).await;
    }

    /// The next DATA payload, or `None` once the peer finished (FIN) or reset the stream or
    /// the connection ended.
    pub async fn recv(&mut self) -> Option<Bytes> {
        let data = self.data.recv().await?;
        // Give the window back only now the data is consumed (stream and session, 3.1).
        if let Ok(delta) = u32::try_from(data.len())
            && delta > 0
        {
            for stream in [self.id, 0] {
                let f = Frame::WindowUpdate { stream, delta };
                let _ = self.out.send(Out::Frame(f)).await;
            }
        }
        Some(data)
    }

    pub fn writer(&self) -> StreamWriter {
        StreamWriter {
            id: self.id,
            out: self.out.clone(),
            reset: self.reset.clone(),
        }
    }
}

impl StreamWriter {
    /// Sends `data` (split to fit DATA frames).
    pub async fn write(&self, data: &[u8]) -> Result<(), StreamClosed> {
        for chunk in data.chunks(64 * 1024) {
            self.send(Frame::Data {
                stream: self.id,
                fin: false,
                data: Bytes::copy_from_slice(chunk),
            })
            .await?;
        }
        Ok(())
    }

    /// Half-closes the stream from this side (an empty DATA frame with FIN).
    pub async fn finish(&self) -> Result<(), StreamClosed> {
        self.send(Frame::Data {
            stream: self.id,
            fin: true,
            data: Bytes::new(),
        })
        .await
    }

    async fn send(&self, f: Frame) -> Result<(), StreamClosed> {
        if self.reset.load(Ordering::Relaxed) {
            return Err(StreamClosed(self.id));
        }
        self.out
            .send(Out::Frame(f))
            .await
            .map_err(|_| StreamClosed(self.id))
    }
}

/// A SPDY connection over an upgraded HTTP connection.
pub struct Connection {
    incoming: mpsc::Receiver<Stream>,
    out: mpsc::Sender<Out>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
    ended: CancellationToken,
}

impl Connection {
    /// Starts reading and writing frames on `io`.
    pub fn new<T>(io: T) -> Result<Self, FrameError>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let encoder = Encoder::new()?;
        let (rd, wr) = tokio::io::split(io);
        let (out_tx, out_rx) = mpsc::channel(64);
        let (in_tx, in_rx) = mpsc::channel(16);
        let ended = CancellationToken::new();
        let writer = tokio::spawn(write_loop(wr, encoder, out_rx));
        let reader = tokio::spawn(read_loop(rd, in_tx, out_tx.clone(), ended.clone()));
        Ok(Self {
            incoming: in_rx,
            out: out_tx,
            reader,
            writer,
            ended,
        })
    }

    /// Cancelled when the peer's side of the connection ended (closed, failed, or sent
    /// something this side cannot read).
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// The next stream the peer opened, or `None` once the connection ended.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.incoming.recv().await
    }

    /// Ends the connection: GOAWAY after everything queued before, then the peer (which has
    /// all it needs) gets a moment to close the connection itself, as client-go does once its
    /// streams are done, before this side shuts it. Closing first could make a client drop
    /// frames it had received but not yet handled.
    pub async fn close(mut self) {
        self.incoming.close();
        let _ = self.out.send(Out::GoAway).await;
        let _ = tokio::time::timeout(LINGER, &mut self.reader).await;
        let _ = self.out.send(Out::Shutdown).await;
        let _ = (&mut self.writer).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn write_loop<W: AsyncWrite>(wr: W, mut encoder: Encoder, mut rx: mpsc::Receiver<Out>) {
    tokio::pin!(wr);
    let mut buf = BytesMut::new();
    let mut last_seen = 0;
    while let Some(item) = rx.recv().await {
        let close = matches!(item, Out::Shutdown);
        let frame = match item {
            Out::Frame(f) => {
                if let Frame::SynReply { stream, .. } = &f {
                    last_seen = last_seen.max(*stream);
                }
                Some(f)
            }
            Out::GoAway => Some(Frame::GoAway {
                last_good: last_seen,
                status: goaway::OK,
            }),
            Out::Shutdown => None,
        };
        if let Some(f) = frame
            && let Err(e) = encoder.encode(&f, &mut buf)
        {
            tracing::debug!(error = %e, "SPDY frame not encoded");
            continue;
        }
        // Batch what is already queued into one write.
        let more = !close && !rx.is_empty() && buf.len() < 64 * 1024;
        if more {
            continue;
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
            return;
        }
        buf.clear();
        if close {
            let _ = wr.shutdown().await;
            return;
        }
    }
}

struct Open {
    data: mpsc::Sender<Bytes>,
    reset: Arc<AtomicBool>,
}

async fn read_loop<R: AsyncRead>(
    rd: R,
    incoming: mpsc::Sender<Stream>,
    out: mpsc::Sender<Out>,
    ended: CancellationToken,
) {
    let _ended = ended.drop_guard();
    tokio::pin!(rd);
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut open: HashMap<u32, Open> = HashMap::new();
    let mut last_id = 0;
    let mut gone_away = false;
    loop {
        let frame = match decoder.decode(&mut buf) {
            Ok(Some(f)) => f,
            Ok(None) => match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            },
            Err(e) => {
                tracing::debug!(error = %e, category = e.category(), "SPDY connection dropped");
                let status = goaway::PROTOCOL_ERROR;
                let f = Frame::GoAway {
                    last_good: last_id,
                    status,
                };
                let _ = out.send(Out::Frame(f)).await;
                return;
            }
        };
        match frame {
            Frame::SynStream {
                stream,
                fin,
                headers,
                ..
            } => {
                // Peer-initiated streams are odd and increasing (section 2.3.2).
                if gone_away || stream % 2 == 0 || stream <= last_id {
                    let status = if gone_away {
                        rst::REFUSED_STREAM
                    } else {
                        rst::PROTOCOL_ERROR
                    };
                    let _ = out
                        .send(Out::Frame(Frame::RstStream { stream, status }))
                        .await;
                    continue;
                }
                last_id = stream;
                let (tx, rx) = mpsc::channel(STREAM_BUFFER);
                let reset = Arc::new(AtomicBool::new(false));
                if !fin {
                    open.insert(
                        stream,
                        Open {
                            data: tx,
                            reset: reset.clone(),
                        },
                    );
                }
                let s = Stream {
                    id: stream,
                    headers,
                    data: rx,
                    out: out.clone(),
                    reset,
                };
                if incoming.send(s).await.is_err() {
                    gone_away = true;
                }
            }
            Frame::Data { stream, fin, data } => {
                if let Some(o) = open.get(&stream)
                    && !data.is_empty()
                    && o.data.send(data).await.is_err()
                {
                    open.remove(&stream); // nobody reads it any more
                }
                if fin {
                    open.remove(&stream);
                }
            }
            Frame::Headers { stream, fin, .. } => {
                if fin {
                    open.remove(&stream);
                }
            }
            Frame::RstStream { stream, .. } => {
                if let Some(o) = open.remove(&stream) {
                    o.reset.store(true, Ordering::Relaxed);
                }
            }
            Frame::Ping { id } => {
                // Pings this side starts are even; answer the peer's.
                if id % 2 == 1 {
                    let _ = out.send(Out::Frame(Frame::Ping { id })).await;
                }
            }
            Frame::GoAway { .. } => gone_away = true,
            Frame::SynReply { .. }
            | Frame::Settings { .. }
            | Frame::WindowUpdate { .. }
            | Frame::Unknown { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::spdy::frame::Decoder;

    /// A peer on the other end of an in-memory pipe, with its own compression contexts.
    struct Peer {
        io: tokio::io::DuplexStream,
        enc: Encoder,
        dec: Decoder,
        buf: BytesMut,
    }

    impl Peer {
        async fn send(&mut self, f: Frame) {
            let mut out = BytesMut::new();
            self.enc.encode(&f, &mut out).unwrap();
            self.io.write_all(&out).await.unwrap();
        }

        async fn recv(&mut self) -> Frame {
            loop {
                if let Some(f) = self.dec.decode(&mut self.buf).unwrap() {
                    return f;
                }
                let n = self.io.read_buf(&mut self.buf).await.unwrap();
                assert!(n > 0, "connection closed");
            }
        }
    }

    fn pair() -> (Connection, Peer) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let conn = Connection::new(a).unwrap();
        let peer = Peer {
            io: b,
            enc: Encoder::new().unwrap(),
            dec: Decoder::new(),
            buf: BytesMut::new(),
        };
        (conn, peer)
    }

    fn syn(stream: u32, kind: &str, fin: bool) -> Frame {
        Frame::SynStream {
            stream,
            associated: 0,
            priority: 0,
            fin,
            unidirectional: false,
            headers: vec![("streamtype".into(), kind.into())],
        }
    }

    #[tokio::test]
    async fn streams_are_accepted_fed_acknowledged_and_finished() {
        let (mut conn, mut peer) = pair();
        peer.send(Frame::Settings {
            clear: false,
            entries: Vec::new(),
        })
        .await;
        peer.send(syn(1, "stdin", false)).await;
        let mut s = conn.accept().await.unwrap();
        assert_eq!((s.id, s.header("streamtype")), (1, Some("stdin")));
        s.reply().await.unwrap();
        assert_eq!(
            peer.recv().await,
            Frame::SynReply {
                stream: 1,
                fin: false,
                headers: Vec::new()
            }
        );
        peer.send(Frame::Data {
            stream: 1,
            fin: true,
            data: Bytes::from_static(b"abc"),
        })
        .await;
        assert_eq!(s.recv().await.as_deref(), Some(&b"abc"[..]));
        assert_eq!(s.recv().await, None, "FIN ends the stream");
        // The consumed bytes are given back, on the stream and on the session.
        for stream in [1, 0] {
            assert_eq!(peer.recv().await, Frame::WindowUpdate { stream, delta: 3 });
        }
        s.writer().write(b"out").await.unwrap();
        s.writer().finish().await.unwrap();
        assert!(
            matches!(peer.recv().await, Frame::Data { stream: 1, fin: false, data } if data == "out")
        );
        assert!(matches!(
            peer.recv().await,
            Frame::Data {
                stream: 1,
                fin: true,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn pings_are_echoed_bad_ids_refused_and_close_says_goaway() {
        let (mut conn, mut peer) = pair();
        peer.send(Frame::Ping { id: 1 }).await;
        assert_eq!(peer.recv().await, Frame::Ping { id: 1 });
        // Even ids are the server's to open.
        peer.send(syn(2, "error", false)).await;
        assert_eq!(
            peer.recv().await,
            Frame::RstStream {
                stream: 2,
                status: rst::PROTOCOL_ERROR
            }
        );
        peer.send(syn(3, "error", true)).await;
        let mut s = conn.accept().await.unwrap();
        s.reply().await.unwrap();
        assert_eq!(s.recv().await, None, "SYN_STREAM with FIN: nothing to read");
        peer.send(Frame::RstStream {
            stream: 3,
            status: 5,
        })
        .await;
        let ended = conn.ended();
        let closing = tokio::spawn(conn.close());
        assert!(matches!(
            peer.recv().await,
            Frame::SynReply { stream: 3, .. }
        ));
        assert_eq!(
            peer.recv().await,
            Frame::GoAway {
                last_good: 3,
                status: goaway::OK
            }
        );
        drop(peer); // the peer closes; the connection ends without waiting out its linger
        closing.await.unwrap();
        assert!(ended.is_cancelled());
        // A reset stream takes no more writes.
        assert!(s.writer().write(b"late").await.is_err());
    }
}
