//! The 32-bit entry points, the switch to long mode, and the call into Rust.
//!
//! Both loaders enter in 32-bit protected mode with paging off and flat segments:
//! - PVH: %ebx = `hvm_start_info` (xen start_info.h, "Start of day structure ... in %ebx").
//! - Multiboot2: %eax = 0x36d76289, %ebx = the boot information (Multiboot2 spec 3.3).
//!
//! The early page tables identity-map the first 4 GiB with 2 MiB pages: enough for the image,
//! the loader's structures and the kernel's first frames. The kernel then builds the real map.

use crate::info::{BootInfo, PhysMemory};

core::arch::global_asm!(
    r#"
    .section .multiboot2, "a"
    .balign 8
mb2_header:
    .long 0xe85250d6                      /* MULTIBOOT2_HEADER_MAGIC */
    .long 0                               /* architecture: i386 protected mode */
    .long mb2_header_end - mb2_header
    .long -(0xe85250d6 + (mb2_header_end - mb2_header))
    .balign 8
    .short 3, 0                           /* entry address tag */
    .long 12
    .long mb2_start32
    .balign 8
    .short 0, 0                           /* end tag */
    .long 8
mb2_header_end:

    .section .note.pvh, "a", @note
    .balign 4
    .long 4                               /* namesz: "Xen\0" */
    .long 4                               /* descsz */
    .long 18                              /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .long pvh_start32
    .balign 4

    .section .boot.text, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    mov esi, 1                            /* protocol: PVH */
    mov edi, ebx
    jmp common32

    .global mb2_start32
mb2_start32:
    cli
    cmp eax, 0x36d76289
    jne boot_hang
    mov esi, 2                            /* protocol: Multiboot2 */
    mov edi, ebx
    jmp common32

common32:
    /* Zero .bss (it holds the stack and the early page tables); keep esi/edi. */
    mov ebp, edi
    mov edi, offset __bss_start
    mov ecx, offset __bss_end
    sub ecx, edi
    shr ecx, 2
    xor eax, eax
    cld
    rep stosd
    mov edi, ebp
    mov dword ptr [boot_protocol], esi
    mov dword ptr [boot_info_addr], edi
    mov esp, offset boot_stack_top

    /* PML4[0] -> PDPT; PDPT[0..4] -> PD0..PD3; 2048 PD entries map 0..4 GiB with 2 MiB pages. */
    mov eax, offset boot_pdpt
    or eax, 0x3                           /* present | writable */
    mov dword ptr [boot_pml4], eax
    mov ecx, 0
1:
    mov eax, ecx
    shl eax, 12
    add eax, offset boot_pd
    or eax, 0x3
    mov dword ptr [boot_pdpt + ecx * 8], eax
    inc ecx
    cmp ecx, 4
    jne 1b
    mov ecx, 0
2:
    mov eax, ecx
    shl eax, 21
    or eax, 0x83                          /* present | writable | page size */
    mov dword ptr [boot_pd + ecx * 8], eax
    mov dword ptr [boot_pd + ecx * 8 + 4], 0
    inc ecx
    cmp ecx, 2048
    jne 2b

    /* CR4: PAE (5), OSFXSR (9), OSXMMEXCPT (10): SSE usable. */
    mov eax, cr4
    or eax, (1 << 5) | (1 << 9) | (1 << 10)
    mov cr4, eax
    mov eax, offset boot_pml4
    mov cr3, eax
    /* EFER (MSR 0xC0000080): LME (8), NXE (11). */
    mov ecx, 0xC0000080
    rdmsr
    or eax, (1 << 8) | (1 << 11)
    wrmsr
    /* CR0: PE (0), MP (1), clear EM (2), PG (31). */
    mov eax, cr0
    and eax, ~(1 << 2)
    or eax, (1 << 0) | (1 << 1) | (1 << 31)
    mov cr0, eax

    lgdt [boot_gdt_ptr]
    mov eax, offset long_mode_entry
    push 0x08
    push eax
    retf

boot_hang:
    hlt
    jmp boot_hang

    .code64
long_mode_entry:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    xor eax, eax
    mov fs, ax
    mov gs, ax
    mov rsp, offset boot_stack_top
    xor ebp, ebp
    mov edi, dword ptr [boot_protocol]
    mov esi, dword ptr [boot_info_addr]
    call {entry}
3:
    hlt
    jmp 3b

    .section .rodata.boot_gdt, "a"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff              /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff              /* 0x10: data */
boot_gdt_end:
boot_gdt_ptr:
    .short boot_gdt_end - boot_gdt - 1
    .long boot_gdt

    .section .data.boot_vars, "aw"
    .balign 4
boot_protocol:
    .long 0
boot_info_addr:
    .long 0

    .section .bss.boot_tables, "aw", @nobits
    .balign 4096
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4096 * 4
    .balign 16
    .global boot_stack_bottom
boot_stack_bottom:
    .skip {stack_size}
    .global boot_stack_top
boot_stack_top:
    "#,
    entry = sym boot_entry,
    stack_size = const BOOT_STACK_SIZE,
);

/// The stack the kernel and the application run on.
pub const BOOT_STACK_SIZE: usize = 512 * 1024;

const PROTOCOL_PVH: u32 = 1;
const PROTOCOL_MULTIBOOT2: u32 = 2;

/// Reads physical memory below 4 GiB through the early identity map.
struct EarlyIdentityMap;

impl PhysMemory for EarlyIdentityMap {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        const LIMIT: u64 = 4 << 30;
        let Some(end) = addr.checked_add(buf.len() as u64) else {
            return false;
        };
        if addr == 0 || end > LIMIT {
            return false;
        }
        // SAFETY: [addr, end) lies below 4 GiB, which the early page tables identity-map;
        // the loader placed its structures there and nothing writes them concurrently.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        true
    }
}

extern "Rust" {
    /// The kernel's entry: `kernel::entry::kernel_main`.
    fn kernel_main(info: BootInfo) -> !;
    /// Called when the loader's structures cannot be parsed (prints and stops).
    fn kernel_boot_failed(what: &str, detail: u64) -> !;
}

extern "C" fn boot_entry(protocol: u32, info_addr: u32) -> ! {
    let mem = EarlyIdentityMap;
    let parsed = match protocol {
        PROTOCOL_PVH => crate::pvh::parse(&mem, info_addr as u64),
        PROTOCOL_MULTIBOOT2 => crate::multiboot2::parse(&mem, info_addr as u64),
        // SAFETY: kernel_boot_failed is defined by the kernel crate linked into the image.
        _ => unsafe { kernel_boot_failed("unknown boot protocol", protocol as u64) },
    };
    match parsed {
        // SAFETY: kernel_main is defined by the kernel crate linked into the image.
        Ok(info) => unsafe { kernel_main(info) },
        Err(e) => {
            let detail = match e {
                crate::info::BootError::BadMagic(m) => m as u64,
                crate::info::BootError::Unreadable(a) => a,
                _ => 0,
            };
            let what = match e {
                crate::info::BootError::BadMagic(_) => "boot info: bad magic",
                crate::info::BootError::Unreadable(_) => "boot info: unreadable address",
                crate::info::BootError::NoMemoryMap => "boot info: no memory map",
                crate::info::BootError::Malformed(m) => m,
            };
            // SAFETY: as above.
            unsafe { kernel_boot_failed(what, detail) }
        }
    }
}
