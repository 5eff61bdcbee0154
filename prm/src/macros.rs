//! The declaration macro.

/// Lower-cases an ASCII identifier at compile time (for the mlx5_ifc.h field names).
#[doc(hidden)]
pub const fn __ascii_lower<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = b[i].to_ascii_lowercase();
        i += 1;
    }
    out
}

/// The mlx5_ifc.h spelling of a field: the lower-cased constant name, or an explicit literal.
#[doc(hidden)]
#[macro_export]
macro_rules! __prm_cname {
    ($f:ident) => {{
        const B: [u8; stringify!($f).len()] = $crate::__ascii_lower(stringify!($f));
        match ::core::str::from_utf8(&B) {
            Ok(s) => s,
            Err(_) => panic!("field names are ASCII"),
        }
    }};
    ($f:ident $c:literal) => {
        $c
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __prm_const {
    ($(#[$m:meta])* $f:ident, $off:expr, $w:expr) => {
        $(#[$m])*
        #[doc = concat!("\n\nOffset `", stringify!($off), "`, width `", stringify!($w), "` bits.")]
        pub const $f: $crate::Field = $crate::Field::new($off, $w);
    };
    ($(#[$m:meta])* $f:ident, $off:expr, $w:expr, $ew:expr) => {
        $(#[$m])*
        #[doc = concat!(
            "\n\nArray at offset `", stringify!($off), "`, `", stringify!($w),
            "` bits in total (0 = flexible), elements of `", stringify!($ew), "` bits."
        )]
        pub const $f: $crate::Array = $crate::Array::new($off, $w, $ew);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __prm_as_field {
    ($f:ident) => {
        $f
    };
    ($f:ident $ew:expr) => {
        $f.as_field()
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __prm_is_union {
    (struct) => {
        false
    };
    (union) => {
        true
    };
}

/// Declares PRM layouts, one module per `mlx5_ifc_<name>_bits` struct or union:
///
/// ```
/// mlx5_prm::prm_struct! {
///     /// Example (not a real PRM struct).
///     struct example[0x80] {
///         OPCODE: 0x0, 0x10;                 // name: offset, width (bits, MSB-first)
///         FLAG_8B = "flag_8B": 0x10, 0x1;    // explicit C name when it is not all lower case
///         INNER: 0x20, mlx5_prm::mtt::BITS;  // nested struct: width of the nested layout
///         PAS: 0x80, 0x0, [0x40];            // array: offset, total width (0 = flexible), [element width]
///     }
/// }
/// assert_eq!(example::OPCODE, mlx5_prm::Field::new(0, 16));
/// assert_eq!(example::FIELDS[1].0, "flag_8B");
/// assert_eq!(example::PAS.elem(2).offset, 0x80 + 2 * 0x40);
/// ```
///
/// Each module gets `NAME`, `BITS`, `BYTES`, `IS_UNION`, one constant per field (a [`Field`],
/// or an [`Array`] for array fields), and `FIELDS: &[(&str, Field)]` with the mlx5_ifc.h names.
///
/// Fields after an optional `@linux` marker are those Linux `include/linux/mlx5/mlx5_ifc.h`
/// declares where rdma-core's header, the reference the layout check holds for that struct,
/// leaves the bits reserved (rdma-core's `sqc` has only `state`). They are constants of the
/// same module but listed in `LINUX_FIELDS`, not `FIELDS`, so the layout dump holds only what
/// the check can verify:
///
/// ```
/// mlx5_prm::prm_struct! {
///     /// Example (not a real PRM struct).
///     struct example2[0x40] {
///         STATE: 0x8, 0x4;
///         @linux
///         CQN: 0x28, 0x18;
///     }
/// }
/// assert_eq!(example2::CQN, mlx5_prm::Field::new(0x28, 0x18));
/// assert_eq!(example2::FIELDS.len(), 1);
/// assert_eq!(example2::LINUX_FIELDS[0].0, "cqn");
/// ```
/// Field names are the upper-cased C names; the C name is derived by lower-casing unless given
/// explicitly. Compile-time checks: every field ends inside the struct, fields of 1..=32 bits
/// stay inside one dword, and wider fields are byte-aligned.
///
/// [`Field`]: crate::Field
/// [`Array`]: crate::Array
#[macro_export]
macro_rules! prm_struct {
    ($(
        $(#[$sm:meta])*
        $kind:ident $name:ident [$bits:expr] {
            $(
                $(#[$fm:meta])*
                $f:ident $(= $c:literal)? : $off:expr, $w:expr $(, [$ew:expr])? ;
            )*
            $(
                @linux
                $(
                    $(#[$lm:meta])*
                    $l:ident $(= $lc:literal)? : $loff:expr, $lw:expr $(, [$lew:expr])? ;
                )*
            )?
        }
    )*) => {$(
        $(#[$sm])*
        #[allow(non_camel_case_types, dead_code)]
        pub mod $name {
            /// The mlx5_ifc.h name (without `mlx5_ifc_` and `_bits`).
            pub const NAME: &str = stringify!($name);
            /// Total width in bits (`MLX5_ST_SZ_BITS`).
            pub const BITS: u32 = $bits;
            /// Total size in bytes (`MLX5_ST_SZ_BYTES`).
            pub const BYTES: usize = ($bits / 8) as usize;
            /// True for a C union (members overlap by design).
            pub const IS_UNION: bool = $crate::__prm_is_union!($kind);
            $( $crate::__prm_const!($(#[$fm])* $f, $off, $w $(, $ew)?); )*
            $($( $crate::__prm_const!($(#[$lm])* $l, $loff, $lw $(, $lew)?); )*)?
            /// Every declared field as `(mlx5_ifc.h name, Field)`; arrays as their whole extent.
            pub const FIELDS: &[(&str, $crate::Field)] = &[
                $( ($crate::__prm_cname!($f $($c)?), $crate::__prm_as_field!($f $($ew)?)), )*
            ];
            /// Fields only Linux mlx5_ifc.h names (declared after `@linux`), as in `FIELDS`.
            pub const LINUX_FIELDS: &[(&str, $crate::Field)] = &[
                $($( ($crate::__prm_cname!($l $($lc)?), $crate::__prm_as_field!($l $($lew)?)), )*)?
            ];
            const _: () = {
                let mut i = 0;
                while i < FIELDS.len() + LINUX_FIELDS.len() {
                    let f = if i < FIELDS.len() {
                        FIELDS[i].1
                    } else {
                        LINUX_FIELDS[i - FIELDS.len()].1
                    };
                    assert!(f.offset + f.width <= BITS, "field ends past the struct");
                    assert!(
                        f.width == 0 || f.width > 32 || f.fits_dword(),
                        "a field of <= 32 bits crosses a dword boundary"
                    );
                    assert!(f.width <= 32 || f.is_byte_aligned(), "wide field not byte-aligned");
                    i += 1;
                }
            };
        }
    )*};
}

/// Builds the registry from the declared modules.
macro_rules! prm_registry {
    ($($m:ident),* $(,)?) => {
        /// Every declared layout: `(name, total bits, fields)`.
        pub const ALL_STRUCTS: &[(&str, u32, &[(&str, Field)])] =
            &[$(($m::NAME, $m::BITS, $m::FIELDS)),*];
        /// `IS_UNION` of each entry of [`ALL_STRUCTS`], in the same order.
        pub const ALL_STRUCTS_IS_UNION: &[bool] = &[$($m::IS_UNION),*];
        /// `LINUX_FIELDS` of each entry of [`ALL_STRUCTS`] (fields only Linux mlx5_ifc.h
        /// names; not in the layout dump), in the same order.
        pub const ALL_STRUCTS_LINUX_FIELDS: &[&[(&str, Field)]] = &[$($m::LINUX_FIELDS),*];
    };
}
