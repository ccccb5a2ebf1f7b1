//! One TCP connection to a ggml RPC worker (`ggml-rpc-server`, llama.cpp's `rpc-server`): the
//! HELLO handshake and version check, then the commands as blocking calls. Every read and write
//! has the timeout given at connect (`-to`), so a worker that stops answering is reported, never
//! waited on forever; after any failure the connection is dead and every later call returns the
//! same error at once. A request is `| cmd: u8 | size: u64 | data |`, a reply `| size: u64 |
//! data |`; commands without a reply are pipelined, and the next reply read (a `GET_TENSOR`)
//! waits for them all. There is no authentication in this protocol: a worker must be reached
//! over a trusted network or a tunnel.

use super::wire::{fnv_hash, Cmd, WireTensor, CONN_CAPS_SIZE, HASH_THRESHOLD, PROTO_VERSION};
use super::RpcError;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bytes this process has written to and read from all its workers (what `--verbose` reports
/// per generated token).
static SENT: AtomicU64 = AtomicU64::new(0);
static RECEIVED: AtomicU64 = AtomicU64::new(0);

/// Bytes sent to and received from every worker so far, all connections together.
pub fn total_traffic() -> (u64, u64) {
    (
        SENT.load(Ordering::Relaxed),
        RECEIVED.load(Ordering::Relaxed),
    )
}

/// A connected, version-checked worker.
pub struct Conn {
    endpoint: String,
    stream: TcpStream,
    timeout: Duration,
    /// Why the connection is no longer usable (the first failure's message).
    dead: Option<String>,
    /// The last graph sent to each device, for `GRAPH_RECOMPUTE` when the next is the same.
    last_graph: Vec<(u32, Vec<u8>)>,
    /// Bytes written and read so far (the traffic a run costs).
    pub sent: u64,
    pub received: u64,
}

/// `HOST:PORT` split, as ggml parses an endpoint (the port after the first colon).
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16), RpcError> {
    let bad = || RpcError::BadEndpoint(endpoint.to_string());
    let (host, port) = endpoint.split_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

impl Conn {
    /// Connects to `endpoint` (`HOST:PORT`) within `timeout` and checks the protocol version.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<Conn, RpcError> {
        let (host, port) = parse_endpoint(endpoint)?;
        let connect_err = |e: io::Error| RpcError::Connect {
            endpoint: endpoint.to_string(),
            message: e.to_string(),
        };
        let addrs: Vec<_> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(connect_err)?
            .collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let stream = stream.ok_or_else(|| connect_err(last))?;
        let setup = |s: &TcpStream| -> io::Result<()> {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))
        };
        setup(&stream).map_err(connect_err)?;
        let mut conn = Conn {
            endpoint: endpoint.to_string(),
            stream,
            timeout,
            dead: None,
            last_graph: Vec::new(),
            sent: 0,
            received: 0,
        };
        conn.hello()?;
        Ok(conn)
    }

    /// The `HOST:PORT` connected to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn hello(&mut self) -> Result<(), RpcError> {
        let rsp = self
            .call(Cmd::Hello, &[&[0u8; CONN_CAPS_SIZE]], 4 + CONN_CAPS_SIZE)
            .map_err(|e| match e {
                // A worker serves one client at a time; the next waits unanswered.
                RpcError::Lost { endpoint, message } if message.starts_with("no answer") => {
                    RpcError::Lost {
                        endpoint,
                        message: format!("{message}; is it serving another client?"),
                    }
                }
                e => e,
            })?;
        let (major, minor, patch) = (rsp[0], rsp[1], rsp[2]);
        let (want_major, want_minor, _) = PROTO_VERSION;
        if major != want_major || minor > want_minor {
            let (a, b, c) = PROTO_VERSION;
            return Err(RpcError::Version {
                endpoint: self.endpoint.clone(),
                got: format!("{major}.{minor}.{patch}"),
                want: format!("{a}.{b}.{c}"),
            });
        }
        Ok(())
    }

    /// The failure as this connection's error, remembered so later calls fail the same way.
    fn fail(&mut self, e: io::Error) -> RpcError {
        let message = match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
                "no answer within {} s (-to/--timeout)",
                self.timeout.as_secs()
            ),
            io::ErrorKind::UnexpectedEof => {
                "the worker closed the connection (it stopped, or refused a request)".to_string()
            }
            _ => format!("connection lost ({e})"),
        };
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.dead = Some(message.clone());
        self.lost(message)
    }

    fn lost(&self, message: String) -> RpcError {
        RpcError::Lost {
            endpoint: self.endpoint.clone(),
            message,
        }
    }

    fn check_alive(&self) -> Result<(), RpcError> {
        match &self.dead {
            Some(m) => Err(self.lost(m.clone())),
            None => Ok(()),
        }
    }

    /// Sends one command whose data is `parts` concatenated.
    fn send(&mut self, cmd: Cmd, parts: &[&[u8]]) -> Result<(), RpcError> {
        self.check_alive()?;
        let size: usize = parts.iter().map(|p| p.len()).sum();
        let mut head = [0u8; 9];
        head[0] = cmd as u8;
        head[1..].copy_from_slice(&(size as u64).to_le_bytes());
        let r = (|| -> io::Result<()> {
            // Small requests go out in one write; large data follows its header.
            if size <= 4096 {
                let mut buf = Vec::with_capacity(9 + size);
                buf.extend_from_slice(&head);
                parts.iter().for_each(|p| buf.extend_from_slice(p));
                self.stream.write_all(&buf)
            } else {
                self.stream.write_all(&head)?;
                for p in parts {
                    self.stream.write_all(p)?;
                }
                Ok(())
            }
        })();
        r.map_err(|e| self.fail(e))?;
        self.sent += 9 + size as u64;
        SENT.fetch_add(9 + size as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads one reply of exactly `size` bytes into `out`.
    fn recv_into(&mut self, out: &mut [u8]) -> Result<(), RpcError> {
        let mut len = [0u8; 8];
        let r = self
            .stream
            .read_exact(&mut len)
            .and_then(|_| self.stream.read_exact(out));
        r.map_err(|e| self.fail(e))?;
        self.received += 8 + out.len() as u64;
        RECEIVED.fetch_add(8 + out.len() as u64, Ordering::Relaxed);
        let got = u64::from_le_bytes(len);
        if got != out.len() as u64 {
            let m = format!("a reply of {got} bytes where {} were expected", out.len());
            self.dead = Some(m.clone());
            return Err(self.lost(m));
        }
        Ok(())
    }

    /// Sends a command and reads its reply of `reply` bytes.
    fn call(&mut self, cmd: Cmd, parts: &[&[u8]], reply: usize) -> Result<Vec<u8>, RpcError> {
        self.send(cmd, parts)?;
        let mut out = vec![0u8; reply];
        self.recv_into(&mut out)?;
        Ok(out)
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
    }

    /// How many devices the worker serves.
    pub fn device_count(&mut self) -> Result<u32, RpcError> {
        let r = self.call(Cmd::DeviceCount, &[], 4)?;
        Ok(u32::from_le_bytes(r[..4].try_into().expect("4 bytes")))
    }

    /// Free and total memory of device `dev`, in bytes.
    pub fn device_memory(&mut self, dev: u32) -> Result<(u64, u64), RpcError> {
        let r = self.call(Cmd::GetDeviceMemory, &[&dev.to_le_bytes()], 16)?;
        Ok((Self::u64_at(&r, 0), Self::u64_at(&r, 8)))
    }

    /// The alignment of device `dev`'s buffers.
    pub fn alignment(&mut self, dev: u32) -> Result<u64, RpcError> {
        let r = self.call(Cmd::GetAlignment, &[&dev.to_le_bytes()], 8)?;
        Ok(Self::u64_at(&r, 0))
    }

    /// The largest buffer device `dev` allocates.
    pub fn max_size(&mut self, dev: u32) -> Result<u64, RpcError> {
        let r = self.call(Cmd::GetMaxSize, &[&dev.to_le_bytes()], 8)?;
        Ok(Self::u64_at(&r, 0))
    }

    /// A buffer of `size` bytes on device `dev`: its handle and its size. Out of memory is an
    /// error naming the worker and the size.
    pub fn alloc_buffer(&mut self, dev: u32, size: u64) -> Result<(u64, u64), RpcError> {
        let r = self.call(
            Cmd::AllocBuffer,
            &[&dev.to_le_bytes(), &size.to_le_bytes()],
            16,
        )?;
        let (ptr, got) = (Self::u64_at(&r, 0), Self::u64_at(&r, 8));
        if ptr == 0 {
            return Err(RpcError::OutOfMemory {
                endpoint: self.endpoint.clone(),
                bytes: size,
            });
        }
        Ok((ptr, got))
    }

    /// The address of buffer `buf`'s first byte, as the worker's tensors name data.
    pub fn buffer_base(&mut self, buf: u64) -> Result<u64, RpcError> {
        let r = self.call(Cmd::BufferGetBase, &[&buf.to_le_bytes()], 8)?;
        Ok(Self::u64_at(&r, 0))
    }

    /// Frees buffer `buf` (the worker forgets its stored graphs too).
    pub fn free_buffer(&mut self, buf: u64) -> Result<(), RpcError> {
        self.last_graph.clear();
        self.send(Cmd::FreeBuffer, &[&buf.to_le_bytes()])
    }

    /// Sets every byte of buffer `buf` to `value`.
    pub fn buffer_clear(&mut self, buf: u64, value: u8) -> Result<(), RpcError> {
        self.send(Cmd::BufferClear, &[&buf.to_le_bytes(), &[value]])
    }

    /// Bytes a tensor takes in its device's buffers (more than its size where the device pads
    /// rows, as CUDA does for quantized rows).
    pub fn alloc_size(&mut self, dev: u32, t: &WireTensor) -> Result<u64, RpcError> {
        let mut req = dev.to_le_bytes().to_vec();
        t.write(&mut req);
        let none = WireTensor::default();
        for _ in 0..super::wire::MAX_SRC {
            none.write(&mut req);
        }
        let r = self.call(Cmd::GetAllocSize, &[&req], 8)?;
        Ok(Self::u64_at(&r, 0))
    }

    /// Lets the device prepare a tensor placed in its buffer (CUDA pads quantized rows).
    pub fn init_tensor(&mut self, t: &WireTensor) -> Result<(), RpcError> {
        self.send(Cmd::InitTensor, &[&t.to_bytes()])
    }

    /// Writes `data` into tensor `t` at byte `offset`. `cache_flag` asks a worker with a file
    /// cache to keep a copy under the data's hash.
    pub fn set_tensor(
        &mut self,
        t: &WireTensor,
        offset: u64,
        data: &[u8],
        cache_flag: bool,
    ) -> Result<(), RpcError> {
        let head = t.to_bytes();
        self.send(
            Cmd::SetTensor,
            &[&head, &[u8::from(cache_flag)], &offset.to_le_bytes(), data],
        )
    }

    /// A weight's bytes, as ggml's client sends them: above the hash threshold the worker is
    /// first asked whether its file cache has data of that hash, and only sent the bytes (with
    /// the flag to cache them) when not. Returns whether the bytes went over the wire.
    pub fn set_weight(&mut self, t: &WireTensor, data: &[u8]) -> Result<bool, RpcError> {
        if data.len() <= HASH_THRESHOLD {
            self.set_tensor(t, 0, data, false)?;
            return Ok(true);
        }
        let mut req = t.to_bytes();
        req.extend_from_slice(&0u64.to_le_bytes());
        req.extend_from_slice(&fnv_hash(data).to_le_bytes());
        let r = self.call(Cmd::SetTensorHash, &[&req], 1)?;
        if r[0] != 0 {
            return Ok(false);
        }
        self.set_tensor(t, 0, data, true)?;
        Ok(true)
    }

    /// Reads `out.len()` bytes of tensor `t` from byte `offset`.
    pub fn get_tensor(
        &mut self,
        t: &WireTensor,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), RpcError> {
        let mut req = t.to_bytes();
        req.extend_from_slice(&offset.to_le_bytes());
        req.extend_from_slice(&(out.len() as u64).to_le_bytes());
        self.send(Cmd::GetTensor, &[&req])?;
        self.recv_into(out)
    }

    /// Runs a serialized graph on device `dev` (see `graph.rs`), or asks the worker to run its
    /// stored copy again when the graph is the same as the last one sent to that device.
    /// Returns at once: the next reply read waits for it.
    pub fn graph_compute(&mut self, dev: u32, graph: Vec<u8>) -> Result<(), RpcError> {
        if self
            .last_graph
            .iter()
            .any(|(d, g)| *d == dev && *g == graph)
        {
            return self.send(Cmd::GraphRecompute, &[&dev.to_le_bytes()]);
        }
        self.send(Cmd::GraphCompute, &[&graph])?;
        self.last_graph.retain(|(d, _)| *d != dev);
        self.last_graph.push((dev, graph));
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
