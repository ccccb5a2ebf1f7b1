//! How many physical cores this process may use: the default for `-t`, as in llama.cpp, since
//! a second hyperthread on a core shares its vector units and only adds contention to
//! compute-bound kernels.

use std::collections::BTreeSet;

/// Physical cores among the CPUs this process may run on, never more than the parallelism the
/// OS grants (affinity, cgroup quota); the logical CPU count where the topology is unknown.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(allowed) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| cpus_allowed(&s))
    else {
        return logical;
    };
    let cores: BTreeSet<(String, String)> = allowed
        .iter()
        .filter_map(|cpu| {
            let dir = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
            Some((read("physical_package_id")?, read("core_id")?))
        })
        .collect();
    if cores.is_empty() {
        logical
    } else {
        cores.len().min(logical).max(1)
    }
}

/// The CPU numbers of the `Cpus_allowed_list:` line of `/proc/self/status`.
fn cpus_allowed(status: &str) -> Option<Vec<usize>> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

/// A kernel CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }

    #[test]
    fn allowed_line_is_found() {
        let status = "Name:\tx\nCpus_allowed:\tf\nCpus_allowed_list:\t0-1\nMems_allowed:\t1\n";
        assert_eq!(cpus_allowed(status), Some(vec![0, 1]));
    }

    #[test]
    fn between_one_and_the_logical_count() {
        let n = physical_cores();
        let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(n >= 1 && n <= logical, "{n} of {logical}");
    }
}
