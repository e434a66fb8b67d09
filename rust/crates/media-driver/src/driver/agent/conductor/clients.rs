//! The per-client quotas and turns of the conductor: a command read from the to-driver ring is
//! admitted (a client id never handed out, or one past `max_clients`, is refused; a keepalive
//! is applied at once) or queued for its client's turn; the clients with commands waiting take
//! turns of `commands_per_cycle_per_client`; an add past a client's handle or counter quota is
//! refused naming the quota ([`crate::driver::ClientQuotas`]).

use super::DriverConductor;
use crate::driver::ClientQuota;
use crate::shm::command::{error_code, Command, Response};
use crate::shm::status::SystemCounter;

/// Bytes of commands waiting in the per-client queues at most (8 rings' worth by default):
/// past it the conductor stops reading the ring until the turns drain them, so many flooding
/// client ids together cannot grow the driver's memory without bound (each one alone is held
/// by `queued_commands_per_client`).
pub(super) const QUEUED_BYTES_MAX: usize = 8 << 20;

impl DriverConductor {
    /// A command just read: a client id never handed out, or a new one past `max_clients`, is
    /// refused; a keepalive is applied at once; anything else waits in its client's queue
    /// (refused past `queued_commands_per_client`).
    pub(super) fn admit(&mut self, command: Command, length: usize, now_ms: i64) {
        let client_id = command.client_id();
        let quotas = self.config.quotas;
        // (code, answer, error-log text): the log names no invented id, so a flood of them is
        // one record whose count grows.
        let refusal = if !self.clients.contains_key(&client_id) {
            let handed_out = self.ring.last_correlation_id().unwrap_or(i64::MAX);
            if !(1..=handed_out).contains(&client_id) {
                let answer =
                    format!("client id {client_id} was never handed out by this driver (ids 1 to {handed_out} so far)");
                Some((error_code::GENERIC_ERROR, answer, "commands from client ids never handed out refused".into()))
            } else if self.clients.len() >= quotas.max_clients {
                let answer = ClientQuota::MaxClients.exceeded(client_id, &quotas);
                let log = format!(
                    "quota max_clients={} reached: commands of further client ids refused (affinity driver {})",
                    quotas.max_clients,
                    ClientQuota::MaxClients.option()
                );
                Some((error_code::QUOTA_EXCEEDED, answer, log))
            } else {
                None
            }
        } else if self.pending.get(&client_id).is_some_and(|queue| queue.len() >= quotas.queued_commands_per_client) {
            let answer = ClientQuota::QueuedCommandsPerClient.exceeded(client_id, &quotas);
            Some((error_code::QUOTA_EXCEEDED, answer.clone(), answer))
        } else {
            None
        };
        if let Some((code, answer, log)) = refusal {
            self.bump(SystemCounter::InvalidCommands);
            self.error(&log, now_ms);
            if let Some(correlation_id) = command.correlation_id() {
                self.respond(Response::Error { correlation_id, code, message: answer }, now_ms);
            }
            return;
        }
        if let Command::ClientKeepalive { client_id, token } = command {
            if !self.clients.contains_key(&client_id) {
                self.touch_client(client_id, now_ms);
            }
            if self.check_token(client_id, token, "keepalive", now_ms) {
                self.touch_client(client_id, now_ms);
                self.bump(SystemCounter::ClientKeepalives);
            }
            return;
        }
        // A close proves no liveness (it may name another client): it waits its turn untouched.
        if !matches!(command, Command::ClientClose { .. }) {
            self.touch_client(client_id, now_ms);
        }
        let queue = self.pending.entry(client_id).or_default();
        if queue.is_empty() {
            self.turns.push_back(client_id);
        }
        queue.push_back((command, length));
        self.pending_bytes += length;
    }

    /// Whether `token` is `client_id`'s close token: the first non-zero token a client id
    /// shows is bound to it; a keepalive or close with another one is refused, logged and
    /// counted (another process naming this client's id, or a client reusing an id).
    pub(super) fn check_token(&mut self, client_id: i64, token: i64, what: &str, now_ms: i64) -> bool {
        let bound = self.clients.get(&client_id).and_then(|client| client.token);
        match bound {
            Some(bound) if bound != token => {
                self.bump(SystemCounter::InvalidCommands);
                self.error(
                    &format!(
                        "client-{what} for client {client_id} ignored: its token is not the one that client's \
                         keepalives carry (sent by another process naming its id?)"
                    ),
                    now_ms,
                );
                false
            }
            Some(_) => true,
            None => {
                if token != 0 {
                    if let Some(client) = self.clients.get_mut(&client_id) {
                        client.token = Some(token);
                    }
                }
                true
            }
        }
    }

    /// Runs the waiting commands: each client with commands waiting in turn, at most
    /// `commands_per_cycle_per_client` of each per duty cycle.
    pub(super) fn run_turns(&mut self, now_ms: i64) -> usize {
        let share = self.config.quotas.commands_per_cycle_per_client;
        let mut work = 0;
        for _ in 0..self.turns.len() {
            let Some(client_id) = self.turns.pop_front() else { break };
            for _ in 0..share {
                let Some((command, length)) = self.pending.get_mut(&client_id).and_then(|queue| queue.pop_front())
                else {
                    break;
                };
                self.pending_bytes -= length;
                work += 1;
                self.on_command(command, now_ms);
            }
            if self.pending.get(&client_id).is_some_and(|queue| !queue.is_empty()) {
                self.turns.push_back(client_id);
            } else {
                self.pending.remove(&client_id);
            }
        }
        work
    }

    /// `Err` naming the quota when `client_id` may not add another publication (or
    /// subscription): its handles, or the counters it owns, are at their quota.
    pub(super) fn check_add_quota(&self, client_id: i64, publication: bool) -> Result<(), (i32, String)> {
        let quotas = &self.config.quotas;
        let (quota, held) = if publication {
            let ipc: usize =
                self.publications.iter().filter_map(|p| p.owners.get(&client_id)).map(|&n| n as usize).sum();
            (ClientQuota::PublicationsPerClient, ipc + self.network_publications_of(client_id))
        } else {
            let ipc = self.subscriptions.iter().filter(|s| s.client_id == client_id).count();
            (ClientQuota::SubscriptionsPerClient, ipc + self.network_subscriptions_of(client_id))
        };
        if held >= quota.get(quotas) {
            return Err((error_code::QUOTA_EXCEEDED, quota.exceeded(client_id, quotas)));
        }
        if self.counters.owned_by(client_id) >= quotas.counters_per_client {
            return Err((error_code::QUOTA_EXCEEDED, ClientQuota::CountersPerClient.exceeded(client_id, quotas)));
        }
        Ok(())
    }
}
