//! Pinning the driver's threads to CPUs (the `*_cpu_affinity` settings, Aeron's
//! `aeron.conductor.cpu.affinity` and its siblings). Linux only: elsewhere a pin is refused.

use std::io;
use std::thread::JoinHandle;

/// The highest CPU number a setting may name (the kernel's `cpu_set_t` holds 1,024).
pub const MAX_CPU: usize = 1023;

/// The CPUs this process may run on (`sched_getaffinity`), ascending.
pub fn allowed() -> io::Result<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity writes at most
        // size_of::<cpu_set_t>() bytes into it, and CPU_ISSET reads within it (i ≤ MAX_CPU).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok((0..=MAX_CPU).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(io::Error::new(io::ErrorKind::Unsupported, "CPU affinity is supported on Linux only"))
    }
}

/// Pins the running thread `thread` to `cpu` alone (`pthread_setaffinity_np`).
pub fn pin<T>(thread: &JoinHandle<T>, cpu: usize) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::thread::JoinHandleExt;
        if cpu > MAX_CPU {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} is above {MAX_CPU}")));
        }
        // SAFETY: the set is a valid cpu_set_t with one CPU below CPU_SETSIZE; the pthread_t
        // is the live thread `thread` joins (not yet joined: we hold its handle).
        let result = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::pthread_setaffinity_np(thread.as_pthread_t(), std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        match result {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (thread, cpu);
        Err(io::Error::new(io::ErrorKind::Unsupported, "CPU affinity is supported on Linux only"))
    }
}

/// `cpus` (ascending) as the kernel lists them: `0-3,6`.
pub fn describe(cpus: &[usize]) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == cpu => *last = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    let text: Vec<String> = ranges
        .into_iter()
        .map(|(first, last)| if first == last { first.to_string() } else { format!("{first}-{last}") })
        .collect();
    if text.is_empty() {
        "none".to_owned()
    } else {
        text.join(",")
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// The CPU the calling thread runs on.
    fn current_cpu() -> usize {
        // SAFETY: sched_getcpu takes no argument and returns the CPU or -1.
        usize::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu")
    }

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(describe(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(describe(&[1]), "1");
        assert_eq!(describe(&[]), "none");
    }

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_only() {
        let cpus = allowed().unwrap();
        let cpu = *cpus.last().expect("this process may run on some CPU");
        let (go, wait) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            wait.recv().unwrap();
            // Pinned while it waited: from now on it runs on `cpu` only.
            (0..100).map(|_| current_cpu()).collect::<Vec<_>>()
        });
        pin(&thread, cpu).unwrap();
        go.send(()).unwrap();
        let seen = thread.join().unwrap();
        assert!(seen.iter().all(|&c| c == cpu), "a thread pinned to CPU {cpu} ran on {seen:?}");
    }

    #[test]
    fn pinning_to_a_cpu_the_process_may_not_use_is_an_error() {
        let cpus = allowed().unwrap();
        let Some(outside) = (0..=MAX_CPU).find(|cpu| !cpus.contains(cpu)) else {
            panic!("this process may use all {} CPUs: none is left to refuse", MAX_CPU + 1)
        };
        let (go, wait) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || wait.recv().unwrap());
        let error = pin(&thread, outside).unwrap_err();
        go.send(()).unwrap();
        thread.join().unwrap();
        assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{error}");
    }
}
