//! Gearman's binary protocol as this worker speaks it: packets framed `\0REQ`/`\0RES`,
//! a command number and a length, arguments split by NUL bytes; and gearmand's addresses.

use tokio::io::AsyncReadExt;

/// gearmand's port when an address names none.
pub const DEFAULT_PORT: u16 = 4730;

/// The largest packet accepted from gearmand (a bigger one closes the connection).
pub(super) const MAX_PACKET: u32 = 64 << 20;

/// Gearman's packet types (the numbers of libgearman's `protocol.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Command {
    /// W→J: this worker can do FUNC.
    CanDo = 1,
    /// W→J: this worker no longer does FUNC.
    CantDo = 2,
    /// W→J: the worker sleeps until a `NOOP`.
    PreSleep = 4,
    /// J→W: wake up, there is work.
    Noop = 6,
    /// C→J: FUNC, UNIQUE, ARG: a job whose client waits for its result.
    SubmitJob = 7,
    /// J→C: HANDLE of a job submitted.
    JobCreated = 8,
    /// J→W: no job to grab.
    NoJob = 10,
    /// J→W: HANDLE, FUNC, ARG.
    JobAssign = 11,
    /// W→J: HANDLE, NUMERATOR, DENOMINATOR.
    WorkStatus = 12,
    /// W→J: HANDLE, RESULT.
    WorkComplete = 13,
    /// W→J: HANDLE.
    WorkFail = 14,
    /// ?→J: TEXT, echoed.
    EchoReq = 16,
    /// J→?: the echo.
    EchoRes = 17,
    /// C→J: FUNC, UNIQUE, ARG: a background job.
    SubmitJobBg = 18,
    /// J→?: CODE, TEXT.
    Error = 19,
    /// W→J: the worker's id.
    SetClientId = 22,
    /// W→J: HANDLE, DATA: a warning the client sees.
    WorkWarning = 29,
    /// J→W: HANDLE, FUNC, UNIQUE, ARG.
    JobAssignUniq = 31,
    /// W→J: a job, with its unique id and reducer.
    GrabJobAll = 39,
    /// J→W: HANDLE, FUNC, UNIQUE, REDUCER, ARG.
    JobAssignAll = 40,
}

/// A packet from gearmand: its type number and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The type number.
    pub kind: u32,
    /// The body: arguments separated by NUL bytes.
    pub body: Vec<u8>,
}

impl Packet {
    /// The body split into `n` arguments at the first `n - 1` NUL bytes (the last one may
    /// hold NULs); `None` when there are fewer.
    pub fn args(&self, n: usize) -> Option<Vec<&[u8]>> {
        let parts: Vec<&[u8]> = self.body.splitn(n, |b| *b == 0).collect();
        (parts.len() == n).then_some(parts)
    }
}

/// A request packet: `\0REQ`, the type, the body's length, the arguments joined by NULs.
pub fn request(command: Command, args: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = args.join(&0u8);
    let mut packet = Vec::with_capacity(12 + body.len());
    packet.extend_from_slice(b"\0REQ");
    packet.extend_from_slice(&(command as u32).to_be_bytes());
    packet.extend_from_slice(&(body.len() as u32).to_be_bytes());
    packet.extend_from_slice(&body);
    packet
}

/// Reads one response packet; an error for anything that is not one.
pub async fn read_packet(
    reader: &mut (impl AsyncReadExt + Unpin),
) -> Result<Packet, std::io::Error> {
    let mut header = [0u8; 12];
    reader.read_exact(&mut header).await?;
    if &header[..4] != b"\0RES" {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a Gearman response (magic {:?})", &header[..4]),
        ));
    }
    let kind = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let size = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    if size > MAX_PACKET {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a Gearman packet of {size} bytes (more than {MAX_PACKET})"),
        ));
    }
    let mut body = vec![0u8; size as usize];
    reader.read_exact(&mut body).await?;
    Ok(Packet { kind, body })
}

/// `HOST:PORT`, with gearmand's port when `address` names none.
pub fn with_port(address: &str) -> String {
    let has_port = address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    match has_port {
        true => address.to_string(),
        false => format!("{address}:{DEFAULT_PORT}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_framed_as_the_protocol_says() {
        let packet = request(Command::CanDo, &[b"reverse"]);
        assert_eq!(&packet[..4], b"\0REQ");
        assert_eq!(&packet[4..8], &1u32.to_be_bytes());
        assert_eq!(&packet[8..12], &7u32.to_be_bytes());
        assert_eq!(&packet[12..], b"reverse");
        let packet = request(Command::WorkStatus, &[b"H:1", b"3", b"10"]);
        assert_eq!(&packet[12..], b"H:1\x003\x0010");
        assert_eq!(request(Command::GrabJobAll, &[]).len(), 12);
    }

    #[tokio::test]
    async fn responses_are_read_and_split_and_bad_ones_refused() {
        let body = b"H:1\0rev\0u\0a\0b\0c";
        let mut bytes = b"\0RES".to_vec();
        bytes.extend_from_slice(&31u32.to_be_bytes());
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(body);
        let packet = read_packet(&mut bytes.as_slice()).await.unwrap();
        assert_eq!(packet.kind, Command::JobAssignUniq as u32);
        let args = packet.args(4).unwrap();
        assert_eq!(args, [&b"H:1"[..], b"rev", b"u", b"a\0b\0c"]);
        assert!(packet.args(9).is_none());

        let mut request_magic = b"\0REQ".to_vec();
        request_magic.extend_from_slice(&[0; 8]);
        assert!(read_packet(&mut request_magic.as_slice()).await.is_err());
        let mut huge = b"\0RES".to_vec();
        huge.extend_from_slice(&13u32.to_be_bytes());
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        let error = read_packet(&mut huge.as_slice()).await.unwrap_err();
        assert!(error.to_string().contains("bytes"), "{error}");
        let short = b"\0RES\0\0".to_vec();
        assert!(read_packet(&mut short.as_slice()).await.is_err());
    }

    #[test]
    fn addresses_get_gearmands_port() {
        assert_eq!(with_port("gm.local"), "gm.local:4730");
        assert_eq!(with_port("gm.local:4731"), "gm.local:4731");
        assert_eq!(with_port("127.0.0.1:7003"), "127.0.0.1:7003");
    }
}
