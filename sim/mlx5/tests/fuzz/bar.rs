//! Target: BAR writes.

use super::*;

pub(super) struct BarFuzz {
    dev: Guarded,
    uars: Vec<u32>,
}

impl BarFuzz {
    pub(super) fn new(rng: &mut Rng) -> BarFuzz {
        if rng.chance(500) {
            // A brought-up device with a UAR, EQ and CQs, so doorbells reach objects.
            let mut env = Env::new(Guarded::new(2 << 20), 1);
            let _cq = env.cq(4);
            let uar = env.uar;
            let dev = env.raw.dev;
            return BarFuzz {
                dev,
                uars: vec![uar],
            };
        }
        let dev = Guarded::new(2 << 20);
        dev.ram.randomize(rng);
        BarFuzz {
            dev,
            // The first UAR index the model hands out (pages 0..2 are the init segment).
            uars: vec![mlx5_sim::objects::uar::FIRST_UAR],
        }
    }
}

impl Epoch for BarFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        for _ in 0..rng.range(1, 8) {
            let off = match rng.below(10) {
                0..=3 => rng.below(0x40) | (rng.below(2) * 0x1000), // init segment, health
                4..=6 => {
                    let page = if rng.chance(800) {
                        rng.pick(&self.uars)
                    } else {
                        rng.range(3, 16) as u32
                    };
                    let o = match rng.below(4) {
                        0 => rng.pick(&[0x20u64, 0x24, 0x40, 0x44, 0x48]),
                        1 => 0x800 + rng.below(0x800),
                        _ => 0x800 + (rng.below(8) * 0x100),
                    };
                    u64::from(page) * 4096 + o
                }
                7 => rng.below(32 << 20),
                8 => (32 << 20) - rng.below(16),
                _ => rng.interesting(),
            };
            let size = if rng.chance(900) {
                rng.pick(&[1u32, 2, 4, 8, 8, 4])
            } else {
                rng.range(0, 70) as u32
            };
            let value = match off {
                // The command queue address: usually inside guest RAM.
                0x10 if rng.chance(500) => u64::from(((BASE >> 32) as u32).to_be()),
                0x14 if rng.chance(500) => {
                    let a = (BASE + rng.below(self.dev.ram.size)) as u32 & !0xfff;
                    u64::from(a.to_be())
                }
                _ => rng.interesting(),
            };
            if rng.chance(300) {
                let _ = self.dev.bar_read(off, size);
            } else {
                self.dev.bar_write(off, value, size);
            }
        }
        if rng.chance(20) {
            // Config space too: decoding off, a reset through FLR, BAR programming.
            let mut f = self.dev.f();
            let off = rng.below(0x100) as u32;
            let len = rng.pick(&[1u32, 2, 4, 3, 0]);
            f.config_write(off, rng.u32(), len);
            let _ = f.config_read(rng.below(0x110) as u32, len);
        }
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.dev.ram.check_guards()
    }
}
