//! GDT with a 64-bit code segment, a data segment and the TSS that holds the IST stacks.

use spin::Once;
use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::load_tss;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::VirtAddr;

/// IST slots (1-based in the IDT, 0-based in the TSS array).
pub const IST_DOUBLE_FAULT: u16 = 1;
pub const IST_NMI_MCE: u16 = 2;
pub const IST_PAGE_FAULT: u16 = 3;
pub const IST_OTHER: u16 = 4;

const IST_STACK_SIZE: usize = 32 * 1024;

#[repr(C, align(16))]
struct Stack([u8; IST_STACK_SIZE]);

static mut IST_STACKS: [Stack; 4] = [const { Stack([0; IST_STACK_SIZE]) }; 4];

static TSS: Once<TaskStateSegment> = Once::new();
static GDT: Once<(GlobalDescriptorTable, [SegmentSelector; 3])> = Once::new();

pub fn init() {
    let tss = TSS.call_once(|| {
        let mut tss = TaskStateSegment::new();
        // The TSS is packed: build the table, then store it whole.
        let mut ist = tss.interrupt_stack_table;
        for (i, slot) in ist.iter_mut().take(4).enumerate() {
            // SAFETY: the IST stacks are only ever used by the CPU through the TSS; taking their
            // address does not create a reference.
            let base = unsafe { core::ptr::addr_of!(IST_STACKS[i]) } as u64;
            *slot = VirtAddr::new(base + IST_STACK_SIZE as u64);
        }
        tss.interrupt_stack_table = ist;
        tss
    });
    let (gdt, sel) = GDT.call_once(|| {
        let mut gdt = GlobalDescriptorTable::new();
        let code = gdt.append(Descriptor::kernel_code_segment());
        let data = gdt.append(Descriptor::kernel_data_segment());
        let tss = gdt.append(Descriptor::tss_segment(tss));
        (gdt, [code, data, tss])
    });
    gdt.load();
    // SAFETY: the selectors come from the GDT just loaded, with matching descriptor types.
    unsafe {
        CS::set_reg(sel[0]);
        SS::set_reg(sel[1]);
        DS::set_reg(sel[1]);
        ES::set_reg(sel[1]);
        load_tss(sel[2]);
    }
}
