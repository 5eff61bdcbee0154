//! CPU exceptions: one assembly stub per vector saves the registers and calls
//! `exception_dispatch`, which prints a full diagnostic and ends the run.
//!
//! Stable Rust has no `x86-interrupt` ABI, so the entry stubs are written in assembly and the
//! 16-byte IDT gates (Intel SDM Vol. 3, 6.14.1) are filled in here.

use core::fmt::Write;
use x86_64::instructions::tables::lidt;
use x86_64::registers::control::Cr2;
use x86_64::structures::DescriptorTablePointer;
use x86_64::VirtAddr;

use super::gdt;

macro_rules! exception_stubs {
    ($($n:literal),*) => {
        core::arch::global_asm!(
            $(
                concat!(".global exception_stub_", $n),
                concat!("exception_stub_", $n, ":"),
                // Vectors without an error code (SDM Vol. 3, table 6-1: all but 8, 10-14, 17, 21,
                // 29, 30) push a 0 so the frame layout is uniform.
                concat!(".if (", $n, " != 8 && ", $n, " != 10 && ", $n, " != 11 && ", $n, " != 12 && ",
                        $n, " != 13 && ", $n, " != 14 && ", $n, " != 17 && ", $n, " != 21 && ",
                        $n, " != 29 && ", $n, " != 30)"),
                "push 0",
                ".endif",
                concat!("push ", $n),
                "jmp exception_common",
            )*
            ".section .rodata.exception_stub_table, \"a\"",
            ".balign 8",
            ".global exception_stub_table",
            "exception_stub_table:",
            $( concat!(".quad exception_stub_", $n), )*
            ".text",
        );
    };
}

exception_stubs!(
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31
);

core::arch::global_asm!(
    r#"
    .text
exception_common:
    push rax
    push rbx
    push rcx
    push rdx
    push rsi
    push rdi
    push rbp
    push r8
    push r9
    push r10
    push r11
    push r12
    push r13
    push r14
    push r15
    mov rdi, rsp
    and rsp, -16
    call {dispatch}
    ud2
    "#,
    dispatch = sym exception_dispatch,
);

extern "C" {
    static exception_stub_table: [u64; 32];
}

/// The registers as the stub leaves them on the stack.
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub vector: u64,
    pub error_code: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

#[repr(C, align(16))]
struct Idt([Gate; 256]);

static mut IDT: Idt = Idt([Gate {
    offset_low: 0,
    selector: 0,
    ist: 0,
    type_attr: 0,
    offset_mid: 0,
    offset_high: 0,
    reserved: 0,
}; 256]);

pub fn init() {
    use x86_64::instructions::segmentation::Segment;
    let cs = x86_64::instructions::segmentation::CS::get_reg().0;
    // SAFETY: the stub table is defined in the assembly above with 32 entries.
    let stubs = unsafe { &*core::ptr::addr_of!(exception_stub_table) };
    // SAFETY: runs once on the boot CPU before interrupts or exceptions are expected; no other
    // reference to IDT exists.
    let idt = unsafe { &mut *core::ptr::addr_of_mut!(IDT) };
    for (vector, &addr) in stubs.iter().enumerate() {
        let ist = match vector {
            8 => gdt::IST_DOUBLE_FAULT,
            2 | 18 => gdt::IST_NMI_MCE,
            14 => gdt::IST_PAGE_FAULT,
            _ => gdt::IST_OTHER,
        };
        idt.0[vector] = Gate {
            offset_low: addr as u16,
            selector: cs,
            ist: ist as u8,
            type_attr: 0x8e, // present, DPL 0, 64-bit interrupt gate
            offset_mid: (addr >> 16) as u16,
            offset_high: (addr >> 32) as u32,
            reserved: 0,
        };
    }
    let ptr = DescriptorTablePointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: VirtAddr::new(idt as *const Idt as u64),
    };
    // SAFETY: the IDT is static and its gates point at the stubs above.
    unsafe { lidt(&ptr) };
}

pub fn name(vector: u64) -> &'static str {
    match vector {
        0 => "#DE divide error",
        1 => "#DB debug",
        2 => "NMI",
        3 => "#BP breakpoint",
        4 => "#OF overflow",
        5 => "#BR bound range",
        6 => "#UD invalid opcode",
        7 => "#NM device not available",
        8 => "#DF double fault",
        10 => "#TS invalid TSS",
        11 => "#NP segment not present",
        12 => "#SS stack fault",
        13 => "#GP general protection",
        14 => "#PF page fault",
        16 => "#MF x87 floating point",
        17 => "#AC alignment check",
        18 => "#MC machine check",
        19 => "#XM SIMD floating point",
        20 => "#VE virtualization",
        21 => "#CP control protection",
        _ => "reserved",
    }
}

extern "C" fn exception_dispatch(frame: &TrapFrame) -> ! {
    let mut out = crate::console::Emergency;
    let f = frame;
    let _ = writeln!(
        out,
        "\nexception: {} (vector {}) error={:#x}\n  rip={:#018x} cs={:#x} rflags={:#x} rsp={:#018x} ss={:#x}",
        name(f.vector),
        f.vector,
        f.error_code,
        f.rip,
        f.cs,
        f.rflags,
        f.rsp,
        f.ss
    );
    let _ = writeln!(out, "  cr2={:#018x}", Cr2::read_raw());
    let _ = writeln!(
        out,
        "  rax={:#018x} rbx={:#018x} rcx={:#018x} rdx={:#018x}\n  rsi={:#018x} rdi={:#018x} rbp={:#018x} r8 ={:#018x}\n  r9 ={:#018x} r10={:#018x} r11={:#018x} r12={:#018x}\n  r13={:#018x} r14={:#018x} r15={:#018x}",
        f.rax, f.rbx, f.rcx, f.rdx, f.rsi, f.rdi, f.rbp, f.r8, f.r9, f.r10, f.r11, f.r12, f.r13, f.r14, f.r15
    );
    super::exit(crate::EXIT_EXCEPTION)
}
