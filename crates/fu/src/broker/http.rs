//! HTTP/1.1 as the broker speaks it: requests read with bounds, answers with a
//! `Content-Length`, and the `key=value` documents and query strings of its endpoints.

use super::{MAX_REQUEST_BODY_BYTES, MAX_REQUEST_HEAD_BYTES, MAX_REQUEST_HEADERS, PROTOCOL_VERSION, Refusal};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;

/// A parsed request.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) query: String,
    /// At most [`MAX_REQUEST_BODY_BYTES`]; only `/summary` reads it.
    pub(super) body: Vec<u8>,
    pub(super) keep_alive: bool,
}

/// Why no request could be read.
#[derive(Debug)]
pub(super) enum RequestError {
    /// The connection failed or timed out: drop it without an answer.
    Io,
    /// A request the broker will not serve: answer this status and message, then close.
    Bad(u16, String),
}

/// Reads one request, its body included; `None` at a clean end of the connection.
pub(super) fn read_request(reader: &mut BufReader<TcpStream>) -> Result<Option<Request>, RequestError> {
    let mut budget = MAX_REQUEST_HEAD_BYTES;
    let mut line = Vec::new();
    // Blank lines before a request line are tolerated (RFC 9112 §2.2).
    let request_line = loop {
        match read_line(reader, &mut line, &mut budget) {
            Ok(Some(l)) if l.is_empty() => continue,
            Ok(Some(l)) => break l,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.for_part(414, "request line")),
        }
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RequestError::Bad(400, format!("malformed request line {request_line:?}")));
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(RequestError::Bad(505, format!("unsupported protocol {version:?}"))),
    };
    if !target.starts_with('/') {
        return Err(RequestError::Bad(400, format!("request target {target:?} must start with '/'")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut keep_alive = http11;
    let mut body_bytes = 0u64;
    let mut headers = 0;
    loop {
        let header = match read_line(reader, &mut line, &mut budget) {
            Ok(Some(header)) => header,
            Ok(None) => return Err(RequestError::Io),
            Err(e) => return Err(e.for_part(431, "request head")),
        };
        if header.is_empty() {
            break;
        }
        headers += 1;
        if headers > MAX_REQUEST_HEADERS {
            return Err(RequestError::Bad(431, format!("more than {MAX_REQUEST_HEADERS} header lines")));
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(RequestError::Bad(400, format!("malformed header line {header:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            body_bytes = value
                .parse()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| RequestError::Bad(400, format!("bad Content-Length {value:?}")))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(RequestError::Bad(501, "Transfer-Encoding is not supported".into()));
        }
    }
    if body_bytes > MAX_REQUEST_BODY_BYTES {
        return Err(RequestError::Bad(413, format!("request body over {MAX_REQUEST_BODY_BYTES} bytes")));
    }
    let mut body = Vec::with_capacity(body_bytes as usize);
    reader.by_ref().take(body_bytes).read_to_end(&mut body).map_err(|_| RequestError::Io)?;
    if body.len() as u64 != body_bytes {
        return Err(RequestError::Io);
    }
    Ok(Some(Request { method: method.to_owned(), path: path.to_owned(), query: query.to_owned(), body, keep_alive }))
}

/// Why a line could not be read.
pub(super) enum LineError {
    Io,
    TooLong,
    NotText,
}

impl LineError {
    fn for_part(self, too_long_status: u16, part: &str) -> RequestError {
        match self {
            LineError::Io => RequestError::Io,
            LineError::TooLong => {
                RequestError::Bad(too_long_status, format!("{part} over {MAX_REQUEST_HEAD_BYTES} bytes"))
            }
            LineError::NotText => RequestError::Bad(400, format!("{part} is not ASCII text")),
        }
    }
}

/// Reads one CRLF- (or LF-) terminated line of at most `budget` bytes, taking its length from
/// the budget. `None` at the end of the stream before any byte.
pub(super) fn read_line(
    reader: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
    budget: &mut usize,
) -> Result<Option<String>, LineError> {
    line.clear();
    let read = reader.by_ref().take(*budget as u64).read_until(b'\n', line).map_err(|_| LineError::Io)?;
    if read == 0 {
        return if *budget == 0 { Err(LineError::TooLong) } else { Ok(None) };
    }
    *budget -= read;
    if line.last() != Some(&b'\n') {
        return Err(if *budget == 0 { LineError::TooLong } else { LineError::Io });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if !line.iter().all(|b| b.is_ascii() && (!b.is_ascii_control() || *b == b'\t')) {
        return Err(LineError::NotText);
    }
    Ok(Some(String::from_utf8_lossy(line).into_owned()))
}

/// What to send back.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) content_type: &'static str,
    pub(super) body: Body,
    /// For `405`: the method the path takes.
    pub(super) allow: Option<&'static str>,
    /// For a `READY` answer: the claim and the file's BU path, to rename back if the answer
    /// cannot be sent.
    pub(super) give_back: Option<(PathBuf, PathBuf)>,
}

pub(super) enum Body {
    Text(String),
    File { file: File, len: u64 },
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

    pub(super) fn send(self, out: &mut TcpStream, keep_alive: bool) -> io::Result<()> {
        let len = match &self.body {
            Body::Text(text) => text.len() as u64,
            Body::File { len, .. } => *len,
        };
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {len}\r\nConnection: {}\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            if keep_alive { "keep-alive" } else { "close" },
        );
        if let Some(allow) = self.allow {
            let _ = write!(head, "Allow: {allow}\r\n");
        }
        head.push_str("\r\n");
        match self.body {
            Body::Text(text) => {
                head.push_str(&text);
                out.write_all(head.as_bytes())?;
            }
            Body::File { file, len } => {
                out.write_all(head.as_bytes())?;
                let copied = io::copy(&mut file.take(len), out)?;
                if copied != len {
                    // The file shrank under us: the client sees a short body and the
                    // connection closes.
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than announced"));
                }
            }
        }
        out.flush()
    }
}

pub(super) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Internal Server Error",
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
