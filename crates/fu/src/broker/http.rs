//! The broker's answers and query strings: `key=value` documents with a `Content-Length`,
//! files streamed from disk, and strictly parsed query parameters.

use super::{PROTOCOL_VERSION, Refusal};
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::AsyncReadExt as _;
use tokio_util::io::ReaderStream;

/// What to send back: a status, a body, and what to do if the body never leaves.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) content_type: &'static str,
    pub(super) body: Body,
    /// For `405`: the methods the path takes.
    pub(super) allow: Option<&'static str>,
    /// For a `READY` answer: the claim and the file's BU path, to rename back if the answer
    /// is dropped before its body is handed to the connection.
    pub(super) give_back: Option<(PathBuf, PathBuf)>,
}

/// An answer's body.
pub(super) enum Body {
    /// A `key=value` document or a message.
    Text(String),
    /// A claimed file or its index JSON, of `len` bytes, streamed from disk.
    File { file: std::fs::File, len: u64 },
}

impl Answer {
    pub(super) fn text(status: u16, text: String) -> Answer {
        Answer { status, content_type: "text/plain", body: Body::Text(text), allow: None, give_back: None }
    }

    /// A `key=value` document: `version`, `runnumber`, then `fields`, then an empty line.
    pub(super) fn document(status: u16, run: u32, fields: &[(&str, String)]) -> Answer {
        let mut text = format!("version={PROTOCOL_VERSION}\nrunnumber={run}\n");
        for (key, value) in fields {
            // Values are single lines.
            let value = value.replace(['\n', '\r'], " ");
            let _ = writeln!(text, "{key}={value}");
        }
        text.push('\n');
        Answer::text(status, text)
    }

    pub(super) fn state(run: u32, state: &str) -> Answer {
        Answer::document(200, run, &[("state", state.to_owned())])
    }

    pub(super) fn error(status: u16, run: u32, message: &str) -> Answer {
        Answer::document(status, run, &[("state", "ERROR".to_owned()), ("errormessage", message.to_owned())])
    }
}

impl IntoResponse for Answer {
    /// `Content-Type`, then `Content-Length` (and `Allow` for 405); the connection layer adds
    /// `Connection` (see [`super::server`]).
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let (len, body) = match self.body {
            Body::Text(text) => {
                let len = text.len() as u64;
                (
                    len,
                    axum::body::Body::new(GiveBackUnsent { text: Some(Bytes::from(text)), give_back: self.give_back }),
                )
            }
            // A file that shrinks under the stream ends the body short: hyper closes the
            // connection, and the client sees a short body.
            Body::File { file, len } => (
                len,
                axum::body::Body::from_stream(ReaderStream::with_capacity(
                    tokio::fs::File::from_std(file).take(len),
                    FILE_CHUNK_BYTES,
                )),
            ),
        };
        let mut response = Response::new(body);
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if let Some(allow) = self.allow {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        response
    }
}

/// Bytes of a file read at once for `/file` and `/index`.
const FILE_CHUNK_BYTES: usize = 256 << 10;

/// A text body that, dropped before the connection took its bytes, gives back the claim it
/// names (the FU never learnt of it): the file goes back to the pool at once.
struct GiveBackUnsent {
    text: Option<Bytes>,
    give_back: Option<(PathBuf, PathBuf)>,
}

impl http_body::Body for GiveBackUnsent {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.give_back = None;
        Poll::Ready(self.text.take().map(|text| Ok(http_body::Frame::data(text))))
    }

    fn is_end_stream(&self) -> bool {
        self.text.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.text.as_ref().map_or(0, |t| t.len() as u64))
    }
}

impl Drop for GiveBackUnsent {
    fn drop(&mut self) {
        if let Some((claimed, raw)) = self.give_back.take() {
            let _ = std::fs::rename(claimed, raw);
        }
    }
}

/// A request's query parameters, decoded.
pub(super) struct Query(BTreeMap<String, String>);

impl Query {
    /// Decodes `raw`, refusing parameters outside `allowed` and repeated ones.
    pub(super) fn parse(raw: &str, allowed: &[&str]) -> Result<Query, Refusal> {
        let mut params = BTreeMap::new();
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (key, value) = (percent_decode(key)?, percent_decode(value)?);
            if !allowed.contains(&key.as_str()) {
                return Err((400, format!("unknown parameter {key:?} (this endpoint takes {})", allowed.join(", "))));
            }
            if params.insert(key.clone(), value).is_some() {
                return Err((400, format!("parameter {key:?} given twice")));
            }
        }
        Ok(Query(params))
    }

    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub(super) fn required(&self, key: &str) -> Result<&str, Refusal> {
        self.get(key).ok_or_else(|| (400, format!("missing parameter {key:?}")))
    }

    pub(super) fn number(&self, key: &str) -> Result<u32, Refusal> {
        let value = self.required(key)?;
        decimal(value).ok_or_else(|| (400, format!("parameter {key:?} must be a decimal 32-bit number, not {value:?}")))
    }

    pub(super) fn optional_number(&self, key: &str) -> Result<Option<u32>, Refusal> {
        self.get(key).map(|_| self.number(key)).transpose()
    }
}

/// A string of ASCII digits only, as a `u32`.
pub(super) fn decimal(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// Decodes `%XX` escapes and `+` (a space); the result must be UTF-8.
pub(super) fn percent_decode(s: &str) -> Result<String, Refusal> {
    let bad = || (400, format!("bad percent-encoding in {s:?}"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Encodes everything but unreserved characters (RFC 3986) as `%XX`.
pub(super) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
