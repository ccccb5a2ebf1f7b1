//! The RPC flags, as llama.cpp takes them: `--rpc HOST:PORT[,HOST:PORT...]` (offload blocks to
//! `ggml-rpc-server` workers; this program only connects, it never listens) and
//! `--tensor-split`/`-ts N0,N1,...` (the share of the offloaded blocks each worker device takes,
//! instead of their free memory), `--device` (which devices take blocks: `RPC0,RPC1`, `CUDA0`,
//! or `none`) and `--list-devices`'s devices. `-ngl` lives with the model flags, `-to` with the
//! server's.

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

    /// Comma-separated devices to offload to (RPC0,RPC1,... for the --rpc workers' devices,
    /// CUDA0 for the GPU), or none to run every block on the CPU; --list-devices lists them.
    #[arg(
        long = "device",
        value_name = "<dev1,dev2,..>",
        env = "LLAMA_ARG_DEVICE"
    )]
    pub device: Option<String>,
}

/// What `--device` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Devices {
    /// `none`: every block on the CPU.
    Nothing,
    /// These devices, by name (`RPC0`, `CUDA0`), in order.
    Named(Vec<String>),
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

    /// The devices `--device` names, each `RPC<n>` or `CUDA<n>` (whether it exists is checked
    /// when the workers and the GPU are known), or `none`; `None` without the flag.
    pub fn devices(&self) -> Result<Option<Devices>, String> {
        let Some(v) = &self.device else {
            return Ok(None);
        };
        let names: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            return Err("--device: no devices specified".to_string());
        }
        if names.len() == 1 && names[0] == "none" {
            return Ok(Some(Devices::Nothing));
        }
        for n in &names {
            let ok = ["RPC", "CUDA"].iter().any(|p| {
                n.strip_prefix(p)
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            });
            if !ok {
                return Err(format!(
                    "--device: invalid device: {n} (see --list-devices)"
                ));
            }
        }
        Ok(Some(Devices::Named(names)))
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
            device: None,
        };
        assert_eq!(
            a.endpoints().unwrap().unwrap(),
            ["127.0.0.1:50052", "host:1"]
        );
        assert_eq!(a.split().unwrap().unwrap(), [3.0, 1.0]);
        let bad = RpcArgs {
            rpc: Some("host".into()),
            tensor_split: Some("a,1".into()),
            device: None,
        };
        assert!(bad.endpoints().unwrap_err().contains("\"host\""));
        assert!(bad.split().unwrap_err().contains("--tensor-split"));
        assert!(RpcArgs::default().endpoints().unwrap().is_none());
    }

    #[test]
    fn devices_are_none_or_device_names() {
        let d = |v: &str| {
            RpcArgs {
                device: Some(v.into()),
                ..RpcArgs::default()
            }
            .devices()
        };
        assert_eq!(d("none").unwrap(), Some(Devices::Nothing));
        assert_eq!(
            d("RPC0, RPC1").unwrap(),
            Some(Devices::Named(vec!["RPC0".into(), "RPC1".into()]))
        );
        assert!(d("CPU").unwrap_err().contains("invalid device: CPU"));
        assert!(d("RPC").unwrap_err().contains("invalid device: RPC"));
        assert!(d(",").unwrap_err().contains("no devices"));
        assert_eq!(RpcArgs::default().devices().unwrap(), None);
    }
}
