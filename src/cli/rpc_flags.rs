//! The RPC flags, as llama.cpp takes them: `--rpc HOST:PORT[,HOST:PORT...]` (offload blocks to
//! `ggml-rpc-server` workers; this program only connects, it never listens) and
//! `--tensor-split`/`-ts N0,N1,...` (the share of the offloaded blocks each worker device takes,
//! instead of their free memory). `-ngl` lives with the model flags, `-to` with the server's.

use clap::Args;

/// RPC offloading flags.
#[derive(Args, Debug, Clone, Default)]
pub struct RpcArgs {
    /// Comma-separated RPC workers (ggml-rpc-server), HOST:PORT each, to offload blocks to. The
    /// protocol has no authentication: use workers only on a trusted network or a tunnel.
    #[arg(long = "rpc", value_name = "SERVERS", env = "LLAMA_ARG_RPC")]
    pub rpc: Option<String>,

    /// Fraction of the offloaded blocks each device takes, comma-separated proportions (such
    /// as 3,1); by default each takes a share proportional to its free memory.
    #[arg(
        long = "tensor-split",
        value_name = "N0,N1,...",
        env = "LLAMA_ARG_TENSOR_SPLIT"
    )]
    pub tensor_split: Option<String>,
}

impl RpcArgs {
    /// The workers of `--rpc`, each checked to be HOST:PORT; `None` without the flag.
    pub fn endpoints(&self) -> Result<Option<Vec<String>>, String> {
        let Some(list) = &self.rpc else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for ep in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let ok = ep
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(format!("--rpc {ep:?}: expected HOST:PORT"));
            }
            out.push(ep.to_string());
        }
        if out.is_empty() {
            return Err("--rpc: expected HOST:PORT[,HOST:PORT...]".to_string());
        }
        Ok(Some(out))
    }

    /// The proportions of `--tensor-split` (separated by commas or slashes, as llama.cpp
    /// reads them), or `None`.
    pub fn split(&self) -> Result<Option<Vec<f64>>, String> {
        let Some(v) = &self.tensor_split else {
            return Ok(None);
        };
        let parts: Result<Vec<f64>, _> = v
            .split([',', '/'])
            .map(|s| s.trim().parse::<f64>())
            .collect();
        match parts {
            Ok(p) if p.iter().all(|x| x.is_finite() && *x >= 0.0) => Ok(Some(p)),
            _ => Err(format!(
                "--tensor-split {v:?}: expected non-negative proportions such as 3,1"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_splits_are_checked() {
        let a = RpcArgs {
            rpc: Some("127.0.0.1:50052, host:1".into()),
            tensor_split: Some("3/1".into()),
        };
        assert_eq!(
            a.endpoints().unwrap().unwrap(),
            ["127.0.0.1:50052", "host:1"]
        );
        assert_eq!(a.split().unwrap().unwrap(), [3.0, 1.0]);
        let bad = RpcArgs {
            rpc: Some("host".into()),
            tensor_split: Some("a,1".into()),
        };
        assert!(bad.endpoints().unwrap_err().contains("\"host\""));
        assert!(bad.split().unwrap_err().contains("--tensor-split"));
        assert!(RpcArgs::default().endpoints().unwrap().is_none());
    }
}
