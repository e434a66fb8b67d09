//! The media driver: its agents ([`agent`]: conductor, sender, receiver over the shared-memory
//! contract of `shm`), its duty-cycle clock ([`clock`]), its settings ([`context`]: [`DriverContext`], the one settings type, and [`idle`]), its events ([`events`]) and the
//! standalone process around it ([`standalone`]). Nothing here uses `client`: clients reach the
//! driver only through the shared-memory files (`rust/src/embedded.rs` runs one in process).

pub mod agent;
pub mod clock;
pub mod context;
pub mod cpu;
pub mod events;
pub mod idle;
pub mod standalone;

pub use context::{ranges, ClientQuota, ClientQuotas, DriverContext, SettingRange, Threading};
pub use events::{DriverEvent, DriverEventKind};
pub use idle::{IdleStrategy, Idler};
