//! SPDY/3.1 frames (SPDY Protocol Draft 3.1, section 2): their byte layout, and the header
//! blocks of SYN_STREAM, SYN_REPLY and HEADERS, zlib-compressed with the draft's dictionary
//! (section 2.6.10.1) in one compression context per direction for the whole connection.
//! Pure: bytes in, frames out, and back.
//!
//! ```text
//! control frame                         data frame
//! +----------------------------------+  +----------------------------------+
//! |1| version (15) |    type (16)    |  |0|       stream id (31)           |
//! +----------------------------------+  +----------------------------------+
//! | flags (8) |     length (24)      |  | flags (8) |     length (24)      |
//! +----------------------------------+  +----------------------------------+
//! |            type data             |  |              data                |
//! ```
//!
//! Not implemented: CREDENTIAL (gone in 3.1) and any compression of DATA frames (deprecated).
//! Control frames of an unknown type are returned as [`Frame::Unknown`] to be ignored, as the
//! draft asks.

use std::sync::OnceLock;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
/// `FLAG_FIN` of DATA, SYN_STREAM, SYN_REPLY and HEADERS frames.
pub const FLAG_FIN: u8 = 0x01;
/// `FLAG_UNIDIRECTIONAL` of SYN_STREAM.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// `FLAG_SETTINGS_CLEAR_SETTINGS` of SETTINGS.
pub const FLAG_CLEAR_SETTINGS: u8 = 0x01;
/// The largest frame payload the 24-bit length can carry.
pub const MAX_LENGTH: usize = 0x00ff_ffff;
/// The largest header block this side inflates (a guard against compression bombs).
const MAX_HEADER_BLOCK: usize = 1 << 20;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// The RST_STREAM status codes this side sends (section 2.6.3).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const REFUSED_STREAM: u32 = 3;
}

/// GOAWAY status codes (section 2.6.6).
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

/// Name/value pairs in wire order; a name sent with several NUL-separated values appears once
/// for each value.
pub type Headers = Vec<(String, String)>;

/// The value of a header, by its (lower-case) name.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// One SETTINGS entry: flags (8 bits), id (24 bits), value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream: u32,
        associated: u32,
        priority: u8,
        fin: bool,
        unidirectional: bool,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Settings {
        clear: bool,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    /// A control frame of a type this side does not know (ignored, per the draft).
    Unknown {
        kind: u16,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("invalid {what} frame: {why}")]
    Invalid {
        what: &'static str,
        why: &'static str,
    },
    #[error("frame payload of {0} bytes is over the 24-bit limit")]
    TooLarge(usize),
    #[error("header block compression: {0}")]
    Compression(String),
}

impl FrameError {
    /// A stable label for logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Version(_) => "unsupported_version",
            Self::Invalid { .. } | Self::TooLarge(_) => "protocol",
            Self::Compression(_) => "compression",
        }
    }
}

fn invalid(what: &'static str, why: &'static str) -> FrameError {
    FrameError::Invalid { what, why }
}

/// The SPDY/3 header compression dictionary (draft 3.1, section 2.6.10.1): 63 length-prefixed
/// header names and values, then a run of status codes, dates and content types.
pub fn dictionary() -> &'static [u8] {
    const WORDS: [&str; 63] = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
    ];
    const LAST_WORDS: [&str; 2] = ["keep-alive", "origin"];
    const TAIL: &str = concat!(
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
        "502504505",
        "203 Non-Authoritative Information",
        "204 No Content",
        "301 Moved Permanently",
        "400 Bad Request",
        "401 Unauthorized",
        "403 Forbidden",
        "404 Not Found",
        "500 Internal Server Error",
        "501 Not Implemented",
        "503 Service Unavailable",
        "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
        "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
        "chunked,text/html,image/png,image/jpg,image/gif,application/xml,",
        "application/xhtml+xml,text/plain,text/javascript,public",
        "privatemax-age=gzip,deflate,sdch",
        "charset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
    );
    static DICTIONARY: OnceLock<Vec<u8>> = OnceLock::new();
    DICTIONARY.get_or_init(|| {
        let mut d = Vec::with_capacity(1424);
        for w in WORDS.iter().chain(LAST_WORDS.iter()) {
            d.put_u32(w.len() as u32);
            d.put_slice(w.as_bytes());
        }
        d.put_slice(TAIL.as_bytes());
        d
    })
}

/// Writes frames; owns the sending direction's compression context.
pub struct Encoder {
    z: Compress,
}

impl Encoder {
    pub fn new() -> Result<Self, FrameError> {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(dictionary())
            .map_err(|e| FrameError::Compression(e.to_string()))?;
        Ok(Self { z })
    }

    /// Appends `frame`'s bytes to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        match frame {
            Frame::Data { stream, fin, data } => {
                let len = check_len(data.len())?;
                out.put_u32(stream & 0x7fff_ffff);
                out.put_u32(u32::from(flag(*fin, FLAG_FIN)) << 24 | len);
                out.put_slice(data);
            }
            Frame::SynStream {
                stream,
                associated,
                priority,
                fin,
                unidirectional,
                headers,
            } => {
                let mut body = BytesMut::new();
                body.put_u32(stream & 0x7fff_ffff);
                body.put_u32(associated & 0x7fff_ffff);
                body.put_u8((priority & 0x07) << 5);
                body.put_u8(0); // credential slot
                body.put_slice(&self.header_block(headers)?);
                let flags = flag(*fin, FLAG_FIN) | flag(*unidirectional, FLAG_UNIDIRECTIONAL);
                control(out, SYN_STREAM, flags, &body)?;
            }
            Frame::SynReply {
                stream,
                fin,
                headers,
            }
            | Frame::Headers {
                stream,
                fin,
                headers,
            } => {
                // The same layout (sections 2.6.2, 2.6.7): stream id, then the header block.
                let kind = if matches!(frame, Frame::SynReply { .. }) {
                    SYN_REPLY
                } else {
                    HEADERS
                };
                let mut body = BytesMut::new();
                body.put_u32(stream & 0x7fff_ffff);
                body.put_slice(&self.header_block(headers)?);
                control(out, kind, flag(*fin, FLAG_FIN), &body)?;
            }
            Frame::RstStream { stream, status } => {
                control(
                    out,
                    RST_STREAM,
                    0,
                    &two_words(stream & 0x7fff_ffff, *status),
                )?;
            }
            Frame::Settings { clear, entries } => {
                let mut body = BytesMut::new();
                body.put_u32(entries.len() as u32);
                for e in entries {
                    body.put_u32(u32::from(e.flags) << 24 | (e.id & 0x00ff_ffff));
                    body.put_u32(e.value);
                }
                control(out, SETTINGS, flag(*clear, FLAG_CLEAR_SETTINGS), &body)?;
            }
            Frame::Ping { id } => control(out, PING, 0, &id.to_be_bytes())?,
            Frame::GoAway { last_good, status } => {
                control(out, GOAWAY, 0, &two_words(last_good & 0x7fff_ffff, *status))?;
            }
            Frame::WindowUpdate { stream, delta } => {
                let words = two_words(stream & 0x7fff_ffff, delta & 0x7fff_ffff);
                control(out, WINDOW_UPDATE, 0, &words)?;
            }
            Frame::Unknown { kind } => control(out, *kind, 0, &[])?,
        }
        Ok(())
    }

    /// The compressed name/value block: a count, then length-prefixed names and values
    /// (32-bit lengths in SPDY/3), flushed with a sync flush so the peer can inflate it now.
    fn header_block(&mut self, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        let mut plain = BytesMut::new();
        plain.put_u32(headers.len() as u32);
        for (name, value) in headers {
            plain.put_u32(name.len() as u32);
            plain.put_slice(name.to_ascii_lowercase().as_bytes());
            plain.put_u32(value.len() as u32);
            plain.put_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let before = self.z.total_in();
        loop {
            let consumed = (self.z.total_in() - before) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(plain.len() + 64);
            }
            let status = self
                .z
                .compress_vec(&plain[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::Compression(e.to_string()))?;
            let done = (self.z.total_in() - before) as usize == plain.len();
            // A sync flush is complete when it left room to spare in the output, or when
            // there was nothing left to write.
            if done && (out.len() < out.capacity() || status == Status::BufError) {
                return Ok(out);
            }
        }
    }
}

/// Reads frames; owns the receiving direction's compression context.
pub struct Decoder {
    z: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self {
            z: Decompress::new(true),
        }
    }

    /// Takes one whole frame off the front of `buf`, or `None` if more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
        if buf.len() < 8 + len {
            return Ok(None);
        }
        let head = buf.split_to(8);
        let mut body = buf.split_to(len).freeze();
        let flags = head[4];
        if head[0] & 0x80 == 0 {
            let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            return Ok(Some(Frame::Data {
                stream,
                fin: flags & FLAG_FIN != 0,
                data: body,
            }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(FrameError::Version(version));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let fin = flags & FLAG_FIN != 0;
        let frame = match kind {
            SYN_STREAM => {
                if body.len() < 10 {
                    return Err(invalid("SYN_STREAM", "shorter than 10 bytes"));
                }
                let stream = body.get_u32() & 0x7fff_ffff;
                let associated = body.get_u32() & 0x7fff_ffff;
                let priority = body.get_u8() >> 5;
                let _slot = body.get_u8();
                Frame::SynStream {
                    stream,
                    associated,
                    priority,
                    fin,
                    unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                    headers: self.headers(&body)?,
                }
            }
            SYN_REPLY | HEADERS => {
                if body.len() < 4 {
                    return Err(invalid("SYN_REPLY/HEADERS", "shorter than 4 bytes"));
                }
                let stream = body.get_u32() & 0x7fff_ffff;
                let headers = self.headers(&body)?;
                if kind == SYN_REPLY {
                    Frame::SynReply {
                        stream,
                        fin,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream,
                        fin,
                        headers,
                    }
                }
            }
            RST_STREAM | GOAWAY | WINDOW_UPDATE => {
                if body.len() != 8 {
                    return Err(invalid(
                        "RST_STREAM/GOAWAY/WINDOW_UPDATE",
                        "length is not 8",
                    ));
                }
                let first = body.get_u32() & 0x7fff_ffff;
                let second = body.get_u32();
                match kind {
                    RST_STREAM => Frame::RstStream {
                        stream: first,
                        status: second,
                    },
                    GOAWAY => Frame::GoAway {
                        last_good: first,
                        status: second,
                    },
                    _ => Frame::WindowUpdate {
                        stream: first,
                        delta: second & 0x7fff_ffff,
                    },
                }
            }
            SETTINGS => {
                if body.len() < 4 {
                    return Err(invalid("SETTINGS", "shorter than 4 bytes"));
                }
                let n = body.get_u32() as usize;
                if body.len() != n.saturating_mul(8) {
                    return Err(invalid("SETTINGS", "length does not match its entries"));
                }
                let entries = (0..n)
                    .map(|_| {
                        let word = body.get_u32();
                        Setting {
                            flags: (word >> 24) as u8,
                            id: word & 0x00ff_ffff,
                            value: body.get_u32(),
                        }
                    })
                    .collect();
                Frame::Settings {
                    clear: flags & FLAG_CLEAR_SETTINGS != 0,
                    entries,
                }
            }
            PING => {
                if body.len() != 4 {
                    return Err(invalid("PING", "length is not 4"));
                }
                Frame::Ping { id: body.get_u32() }
            }
            other => Frame::Unknown { kind: other },
        };
        Ok(Some(frame))
    }

    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, FrameError> {
        let plain = self.inflate(compressed)?;
        parse_header_block(&plain)
    }

    /// Inflates one header block; the zlib stream asks for the dictionary on the first block.
    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        let before = self.z.total_in();
        loop {
            let consumed = (self.z.total_in() - before) as usize;
            if out.capacity() - out.len() < 256 {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(invalid("header block", "inflates past 1 MiB"));
                }
                out.reserve(out.len().max(1024));
            }
            match self
                .z
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync)
            {
                Ok(Status::StreamEnd) => return Ok(out),
                Ok(_) => {
                    let done = (self.z.total_in() - before) as usize == input.len();
                    if done && out.len() < out.capacity() {
                        return Ok(out);
                    }
                }
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(dictionary())
                        .map_err(|e| FrameError::Compression(e.to_string()))?;
                }
                Err(e) => return Err(FrameError::Compression(e.to_string())),
            }
        }
    }
}

/// Parses an inflated name/value block (section 2.6.10).
pub fn parse_header_block(mut b: &[u8]) -> Result<Headers, FrameError> {
    let bad = |why| invalid("header block", why);
    let string = |b: &mut &[u8]| -> Result<String, FrameError> {
        if b.len() < 4 {
            return Err(bad("truncated length"));
        }
        let n = b.get_u32() as usize;
        if b.len() < n {
            return Err(bad("truncated string"));
        }
        let s = String::from_utf8_lossy(&b[..n]).into_owned();
        b.advance(n);
        Ok(s)
    };
    if b.len() < 4 {
        return Err(bad("no pair count"));
    }
    let n = b.get_u32();
    let mut out = Vec::new();
    for _ in 0..n {
        let name = string(&mut b)?;
        let value = string(&mut b)?;
        if name.is_empty() {
            return Err(bad("empty header name"));
        }
        for v in value.split('\0') {
            out.push((name.clone(), v.to_string()));
        }
    }
    Ok(out)
}

fn flag(on: bool, bit: u8) -> u8 {
    if on { bit } else { 0 }
}

fn check_len(n: usize) -> Result<u32, FrameError> {
    if n > MAX_LENGTH {
        return Err(FrameError::TooLarge(n));
    }
    Ok(n as u32)
}

fn two_words(a: u32, b: u32) -> [u8; 8] {
    let mut w = [0u8; 8];
    w[..4].copy_from_slice(&a.to_be_bytes());
    w[4..].copy_from_slice(&b.to_be_bytes());
    w
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, body: &[u8]) -> Result<(), FrameError> {
    let len = check_len(body.len())?;
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32(u32::from(flags) << 24 | len);
    out.put_slice(body);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(f: &Frame) -> Vec<u8> {
        let mut out = BytesMut::new();
        Encoder::new().unwrap().encode(f, &mut out).unwrap();
        out.to_vec()
    }

    fn decode(bytes: &[u8]) -> Frame {
        let mut buf = BytesMut::from(bytes);
        let f = Decoder::new().decode(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        f
    }

    #[test]
    fn the_dictionary_is_the_drafts() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\0\0\0\x07options");
        assert!(d.ends_with(b",*,enq=0."));
        let origin = b"\0\0\0\x06origin100101";
        assert!(d.windows(origin.len()).any(|w| w == origin));
    }

    #[test]
    fn data_frame_layout() {
        // Section 2.2.2: C bit clear, 31-bit stream id, flags, 24-bit length, data.
        let f = Frame::Data {
            stream: 3,
            fin: true,
            data: Bytes::from_static(b"hi"),
        };
        let bytes = encode(&f);
        assert_eq!(bytes, [0, 0, 0, 3, 0x01, 0, 0, 2, b'h', b'i']);
        assert_eq!(decode(&bytes), f);
    }

    #[test]
    fn fixed_size_control_frame_layouts() {
        // Sections 2.6.3, 2.6.5, 2.6.6, 2.6.8: 0x8003, type, flags 0, length, words.
        let cases: [(Frame, Vec<u8>); 4] = [
            (
                Frame::RstStream {
                    stream: 5,
                    status: rst::REFUSED_STREAM,
                },
                vec![0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 5, 0, 0, 0, 3],
            ),
            (
                Frame::Ping { id: 1 },
                vec![0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1],
            ),
            (
                Frame::GoAway {
                    last_good: 7,
                    status: goaway::OK,
                },
                vec![0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 0],
            ),
            (
                Frame::WindowUpdate {
                    stream: 1,
                    delta: 0x1_0000,
                },
                vec![0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 1, 0, 0],
            ),
        ];
        for (frame, bytes) in cases {
            assert_eq!(encode(&frame), bytes, "{frame:?}");
            assert_eq!(decode(&bytes), frame);
        }
    }

    #[test]
    fn settings_layout() {
        // Section 2.6.4: count, then flags (8) + id (24) and a 32-bit value per entry.
        let bytes = [
            0x80, 3, 0, 4, 0, 0, 0, 12, 0, 0, 0, 1, 0x01, 0, 0, 7, 0, 1, 0, 0,
        ];
        let f = decode(&bytes);
        assert_eq!(
            f,
            Frame::Settings {
                clear: false,
                entries: vec![Setting {
                    flags: 1,
                    id: 7,
                    value: 0x1_0000
                }]
            }
        );
        assert_eq!(encode(&f), bytes);
    }

    #[test]
    fn syn_stream_header_block_round_trips_through_one_context_per_direction() {
        let mut enc = Encoder::new().unwrap();
        let mut dec = Decoder::new();
        let mut wire = BytesMut::new();
        let frames: Vec<Frame> = (0..3u32)
            .map(|i| Frame::SynStream {
                stream: 1 + 2 * i,
                associated: 0,
                priority: 0,
                fin: i == 0,
                unidirectional: false,
                headers: vec![
                    (
                        "streamtype".into(),
                        ["error", "stdout", "stderr"][i as usize].into(),
                    ),
                    ("port".into(), "8080".into()),
                ],
            })
            .collect();
        for f in &frames {
            enc.encode(f, &mut wire).unwrap();
        }
        // The fixed part of SYN_STREAM (section 2.6.1): type 1, FIN, stream 1, no parent.
        assert_eq!(&wire[..4], &[0x80, 3, 0, 1]);
        assert_eq!(wire[4], FLAG_FIN);
        assert_eq!(&wire[8..18], &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        // A zlib stream with a preset dictionary: FDICT set in the header.
        assert_eq!(wire[18], 0x78);
        assert_ne!(wire[19] & 0x20, 0);
        // Only complete frames come out.
        let mut partial = wire.split_to(wire.len() - 1);
        let mut got = Vec::new();
        while let Some(f) = dec.decode(&mut partial).unwrap() {
            got.push(f);
        }
        assert_eq!(got.len(), 2);
        partial.unsplit(wire);
        got.push(dec.decode(&mut partial).unwrap().unwrap());
        assert_eq!(got, frames);
    }

    #[test]
    fn header_block_layout_and_multiple_values() {
        let mut b = vec![0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0, 3, b'x', 0, b'y'];
        assert_eq!(
            parse_header_block(&b).unwrap(),
            vec![("a".into(), "x".into()), ("a".into(), "y".into())]
        );
        b.truncate(10);
        assert!(parse_header_block(&b).is_err());
    }

    #[test]
    fn other_versions_and_unknown_types() {
        let mut buf = BytesMut::from(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert!(matches!(
            Decoder::new().decode(&mut buf),
            Err(FrameError::Version(2))
        ));
        assert_eq!(
            decode(&[0x80, 3, 0, 10, 0, 0, 0, 2, 1, 2]),
            Frame::Unknown { kind: 10 }
        );
    }
}
