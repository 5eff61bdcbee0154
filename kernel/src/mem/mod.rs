//! Physical memory: frame pools, the identity map, the heap and DMA buffers.

pub mod frames;
pub mod paging;
#[cfg(target_os = "none")]
pub mod system;

pub use frames::{FramePools, OutOfMemory, PageSize, PoolStats, Range, SIZE_1G, SIZE_2M, SIZE_4K};
pub use paging::{Cache, IdentityMap, TableStore};
#[cfg(target_os = "none")]
pub use system::{alloc_dma, alloc_dma_above, map_physical, pool_stats, DmaBuffer};
