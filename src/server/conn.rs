//! Where the server listens and what it accepts: TCP addresses, and on Unix UNIX-domain sockets
//! (`--host /path/name.sock`, as llama-server takes them), both serving the same HTTP. A
//! [`Conn`] is one accepted connection of either kind, with the socket operations the server
//! uses (timeouts, cloning for the writing half, shutdown, checking that the client is still
//! there).

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
#[cfg(unix)]
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

/// The address admission counts every UNIX-socket client under: they are all local processes,
/// and together hold one client's share of the workers.
#[cfg(unix)]
pub const UNIX_CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

/// A listening socket.
pub enum Listener {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(UnixListener, std::path::PathBuf),
}

impl Listener {
    /// Listens on the UNIX socket `path`. A socket file left by an earlier server that no longer
    /// answers is replaced; a live one, or a file that is not a socket, is an error.
    #[cfg(unix)]
    pub fn unix(path: &Path) -> io::Result<Listener> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "the path exists and is not a socket",
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another server is listening there",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(Listener::Unix(
            UnixListener::bind(path)?,
            path.to_path_buf(),
        ))
    }

    #[cfg(not(unix))]
    pub fn unix(_path: &Path) -> io::Result<Listener> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "UNIX sockets exist on Unix only",
        ))
    }

    /// How the address is shown: `http://HOST:PORT/` or `unix://PATH`.
    pub fn url(&self) -> io::Result<String> {
        match self {
            Listener::Tcp(l) => {
                let addr = l.local_addr()?;
                let ip = if addr.ip().is_unspecified() {
                    IpAddr::from([127, 0, 0, 1])
                } else {
                    addr.ip()
                };
                Ok(match ip {
                    IpAddr::V6(ip) => format!("http://[{ip}]:{}/", addr.port()),
                    IpAddr::V4(ip) => format!("http://{ip}:{}/", addr.port()),
                })
            }
            #[cfg(unix)]
            Listener::Unix(_, path) => Ok(format!("unix://{}", path.display())),
        }
    }

    /// Waits for the next connection and the address admission counts it under.
    pub fn accept(&self) -> io::Result<(Conn, IpAddr)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                Ok((Conn::Tcp(s), peer.ip()))
            }
            #[cfg(unix)]
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                Ok((Conn::Unix(s), UNIX_CLIENT))
            }
        }
    }
}

/// One client connection.
pub enum Conn {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

/// Calls `$f` on the connection's stream, whichever kind it is.
macro_rules! each {
    ($conn:expr, $s:ident => $f:expr) => {
        match $conn {
            Conn::Tcp($s) => $f,
            #[cfg(unix)]
            Conn::Unix($s) => $f,
        }
    };
}

impl Conn {
    /// Another handle on the same connection (the writing half).
    pub fn try_clone(&self) -> io::Result<Conn> {
        match self {
            Conn::Tcp(s) => s.try_clone().map(Conn::Tcp),
            #[cfg(unix)]
            Conn::Unix(s) => s.try_clone().map(Conn::Unix),
        }
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        each!(self, s => s.set_read_timeout(t))
    }

    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        each!(self, s => s.set_write_timeout(t))
    }

    /// Sends small writes at once (TCP; a UNIX socket has no Nagle delay).
    pub fn set_nodelay(&self) {
        #[cfg_attr(not(unix), allow(irrefutable_let_patterns))]
        if let Conn::Tcp(s) = self {
            let _ = s.set_nodelay(true);
        }
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        each!(self, s => s.shutdown(how))
    }

    /// Fixes the send buffer at about `bytes` (see `socket`).
    pub fn limit_send_buffer(&self, bytes: usize) {
        each!(self, s => super::socket::limit_send_buffer(s, bytes))
    }

    /// True when the peer has closed its side (checked without blocking or consuming data).
    pub fn client_gone(&self) -> bool {
        super::socket::peer_closed(self)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        each!(self, s => s.read(buf))
    }
}

impl Read for &Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        each!(*self, s => (&*s).read(buf))
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        each!(self, s => s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        each!(self, s => s.flush())
    }
}

impl super::http::Source for Conn {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        Conn::set_read_timeout(self, timeout)
    }
}
