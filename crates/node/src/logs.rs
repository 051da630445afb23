//! Container logs, one file per container instance (`<n>.log`), in the CRI line format
//! `<RFC 3339 nano timestamp> <stdout|stderr> <F|P> <content>` so that `timestamps` and
//! `sinceSeconds` can be answered; plus the reader behind the kubelet log endpoint.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

/// Longest content of one log record; longer lines are split into partial (`P`) records.
const MAX_RECORD: usize = 16 * 1024;

/// Log files still being written (their container instance is running).
#[derive(Debug, Default)]
pub struct ActiveLogs(Mutex<HashSet<PathBuf>>);

impl ActiveLogs {
    fn set(&self, path: &Path, active: bool) {
        if let Ok(mut s) = self.0.lock() {
            if active {
                s.insert(path.to_path_buf());
            } else {
                s.remove(path);
            }
        }
    }

    pub fn is_active(&self, path: &Path) -> bool {
        self.0.lock().map(|s| s.contains(path)).unwrap_or(false)
    }
}

/// The log file of instance `n` in a container's log directory.
pub fn instance_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n}.log"))
}

/// Instance numbers with a log file, ascending.
pub fn instances(dir: &Path) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

/// Copies a process's stdout and stderr into `path` until both close.
pub async fn pump(
    path: PathBuf,
    stdout: impl AsyncRead + Unpin + Send + 'static,
    stderr: impl AsyncRead + Unpin + Send + 'static,
    active: Arc<ActiveLogs>,
) {
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => Arc::new(Mutex::new(f)),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot open container log");
            return;
        }
    };
    active.set(&path, true);
    let out = tokio::spawn(copy_stream(stdout, "stdout", file.clone()));
    let err = tokio::spawn(copy_stream(stderr, "stderr", file));
    let _ = out.await;
    let _ = err.await;
    active.set(&path, false);
}

async fn copy_stream(
    reader: impl AsyncRead + Unpin,
    stream: &'static str,
    file: Arc<Mutex<std::fs::File>>,
) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let full = buf.last() == Some(&b'\n');
        if full {
            buf.pop();
        }
        let chunks: Vec<&[u8]> = if buf.is_empty() {
            vec![&buf[..]]
        } else {
            buf.chunks(MAX_RECORD).collect()
        };
        let last = chunks.len().saturating_sub(1);
        let mut record = Vec::with_capacity(buf.len() + 64);
        for (i, chunk) in chunks.into_iter().enumerate() {
            let tag = if full && i == last { 'F' } else { 'P' };
            let _ = write!(record, "{} {stream} {tag} ", Timestamp::now());
            record.extend_from_slice(chunk);
            record.push(b'\n');
        }
        if let Ok(mut f) = file.lock() {
            let _ = f.write_all(&record);
        }
    }
}

/// A parsed log record.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: Timestamp,
    pub stream: &'a str,
    pub partial: bool,
    pub content: &'a [u8],
}

/// Parses one line (without its newline) of a log file.
pub fn parse_record(line: &[u8]) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    let partial = parts.next()? == b"P";
    let content = parts.next().unwrap_or_default();
    Some(Record {
        time,
        stream,
        partial,
        content,
    })
}

/// What the log endpoint was asked for.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    pub follow: bool,
    pub tail_lines: Option<usize>,
    pub timestamps: bool,
    pub since: Option<Timestamp>,
    pub limit_bytes: Option<usize>,
}

fn render(rec: &Record<'_>, timestamps: bool, out: &mut Vec<u8>) {
    if timestamps {
        let _ = write!(out, "{} ", rec.time);
    }
    out.extend_from_slice(rec.content);
    if !rec.partial {
        out.push(b'\n');
    }
}

/// Renders the complete records of `data`, applying `since` and `tail_lines`.
pub fn render_all(data: &[u8], opts: &LogOptions) -> Vec<u8> {
    let records: Vec<Record<'_>> = data
        .split(|b| *b == b'\n')
        .filter_map(parse_record)
        .filter(|r| opts.since.is_none_or(|s| r.time >= s))
        .collect();
    let start = match opts.tail_lines {
        Some(n) => {
            // Count full lines from the end; partial records belong to the line after them.
            let mut full_seen = 0;
            let mut start = records.len();
            for (i, r) in records.iter().enumerate().rev() {
                if !r.partial {
                    if full_seen == n {
                        break;
                    }
                    full_seen += 1;
                }
                start = i;
            }
            start
        }
        None => 0,
    };
    let mut out = Vec::new();
    for r in &records[start..] {
        render(r, opts.timestamps, &mut out);
    }
    out
}

/// Streams a log file into `tx`: what is there now, then (with `follow`) new records until
/// the instance stops writing or the receiver goes away.
pub async fn stream_file(
    path: PathBuf,
    opts: LogOptions,
    active: Arc<ActiveLogs>,
    tx: mpsc::Sender<Vec<u8>>,
) {
    let mut budget = opts.limit_bytes.unwrap_or(usize::MAX);
    let data = tokio::fs::read(&path).await.unwrap_or_default();
    // Only complete lines are consumed; a trailing fragment is re-read later.
    let consumed = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let first = render_all(&data[..consumed], &opts);
    if !send_limited(&tx, first, &mut budget).await || !opts.follow {
        return;
    }
    let mut offset = consumed;
    loop {
        let still_writing = active.is_active(&path);
        let data = tokio::fs::read(&path).await.unwrap_or_default();
        if data.len() > offset {
            let end = data[offset..]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(offset, |i| offset + i + 1);
            let mut out = Vec::new();
            for rec in data[offset..end]
                .split(|b| *b == b'\n')
                .filter_map(parse_record)
            {
                render(&rec, opts.timestamps, &mut out);
            }
            offset = end;
            if !send_limited(&tx, out, &mut budget).await {
                return;
            }
        } else if !still_writing {
            return;
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn send_limited(tx: &mpsc::Sender<Vec<u8>>, mut chunk: Vec<u8>, budget: &mut usize) -> bool {
    if chunk.len() > *budget {
        chunk.truncate(*budget);
    }
    *budget -= chunk.len();
    if !chunk.is_empty() && tx.send(chunk).await.is_err() {
        return false;
    }
    *budget > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> Vec<u8> {
        b"2024-01-01T00:00:01Z stdout F one\n\
          2024-01-01T00:00:02Z stderr F two\n\
          2024-01-01T00:00:03Z stdout P thr\n\
          2024-01-01T00:00:03Z stdout F ee\n\
          2024-01-01T00:00:04Z stdout F \n"
            .to_vec()
    }

    #[test]
    fn renders_with_tail_since_and_timestamps() {
        let all = render_all(&log(), &LogOptions::default());
        assert_eq!(String::from_utf8(all).unwrap(), "one\ntwo\nthree\n\n");
        let tail = render_all(
            &log(),
            &LogOptions {
                tail_lines: Some(2),
                ..Default::default()
            },
        );
        assert_eq!(String::from_utf8(tail).unwrap(), "three\n\n");
        let since = render_all(
            &log(),
            &LogOptions {
                since: Some("2024-01-01T00:00:02Z".parse().unwrap()),
                ..Default::default()
            },
        );
        assert_eq!(String::from_utf8(since).unwrap(), "two\nthree\n\n");
        let ts = render_all(
            &log(),
            &LogOptions {
                timestamps: true,
                tail_lines: Some(1),
                ..Default::default()
            },
        );
        assert_eq!(String::from_utf8(ts).unwrap(), "2024-01-01T00:00:04Z \n");
        let none = render_all(
            &log(),
            &LogOptions {
                tail_lines: Some(0),
                ..Default::default()
            },
        );
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn pump_writes_records_and_stream_follows_until_done() {
        let dir = tempfile::tempdir().unwrap();
        let path = instance_path(dir.path(), 0);
        let active = Arc::new(ActiveLogs::default());
        let (mut w_out, r_out) = tokio::io::duplex(64);
        let (w_err, r_err) = tokio::io::duplex(64);
        let pump = tokio::spawn(pump(path.clone(), r_out, r_err, active.clone()));
        use tokio::io::AsyncWriteExt;
        w_out.write_all(b"hello\nwor").await.unwrap();
        while !active.is_active(&path) {
            tokio::task::yield_now().await;
        }
        let (tx, mut rx) = mpsc::channel(8);
        let reader = tokio::spawn(stream_file(
            path.clone(),
            LogOptions {
                follow: true,
                limit_bytes: Some(11),
                ..Default::default()
            },
            active.clone(),
            tx,
        ));
        w_out.write_all(b"ld\nmore\n").await.unwrap();
        drop(w_out);
        drop(w_err);
        pump.await.unwrap();
        reader.await.unwrap();
        let mut got = Vec::new();
        while let Some(chunk) = rx.recv().await {
            got.extend(chunk);
        }
        assert_eq!(String::from_utf8(got).unwrap(), "hello\nworld");
        assert_eq!(instances(dir.path()), vec![0]);
    }
}

/// The termination message kubelet takes from the logs under `FallbackToLogsOnError`: the last
/// chunk of the instance's output, at most 80 lines and 2048 bytes, whichever is smaller.
pub fn tail_message(path: &Path) -> Option<String> {
    const MAX_LINES: usize = 80;
    const MAX_BYTES: usize = 2048;
    let data = std::fs::read(path).ok()?;
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut open = false;
    for raw in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Some(record) = parse_record(raw) else {
            continue;
        };
        match lines.last_mut() {
            Some(line) if open => line.extend_from_slice(record.content),
            _ => lines.push(record.content.to_vec()),
        }
        open = record.partial;
    }
    let start = lines.len().saturating_sub(MAX_LINES);
    let mut text = lines[start..].join(&b'\n');
    if text.is_empty() {
        return None;
    }
    if text.len() > MAX_BYTES {
        text.drain(..text.len() - MAX_BYTES);
    }
    Some(String::from_utf8_lossy(&text).into_owned())
}

#[cfg(test)]
mod tail_tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_lines_and_bytes_of_the_output() {
        let dir = std::env::temp_dir().join(format!("steward-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.log");
        let mut text = String::new();
        for n in 0..100 {
            text.push_str(&format!("2026-11-25T10:00:00Z stderr F line {n}\n"));
        }
        text.push_str("2026-11-25T10:00:01Z stderr P FATAL:  invalid value for ");
        text.push('\n');
        text.push_str("2026-11-25T10:00:01Z stderr F parameter \"shared_buffers\"\n");
        std::fs::write(&path, &text).unwrap();
        let tail = tail_message(&path).unwrap();
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), 80);
        assert_eq!(lines[0], "line 21");
        assert_eq!(
            lines[79],
            "FATAL:  invalid value for parameter \"shared_buffers\""
        );
        let long = "x".repeat(3000);
        std::fs::write(&path, format!("2026-11-25T10:00:00Z stdout F {long}\n")).unwrap();
        assert_eq!(tail_message(&path).unwrap().len(), 2048);
        std::fs::write(&path, "").unwrap();
        assert_eq!(tail_message(&path), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
