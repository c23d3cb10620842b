/*
 * Entering a 32-bit ARM kernel on QEMU's raspi3b/raspi3ap/raspi4b: a
 * SIMULATION of what the Raspberry Pi firmware does for a Pi 3/4 booted with
 * arm_64bit=0 (it starts the cores in AArch32 and enters the kernel through
 * its 32-bit armstub).
 *
 * QEMU cannot do that itself: with TCG these machines' Cortex-A53/A72 always
 * reset into AArch64 ('aarch64=off' needs KVM), and `-kernel` runs a zImage
 * as AArch64 code.  QEMU's loader starts a raw image at EL2 with x0 = the
 * device tree, so this stub, placed in front of the zImage, makes EL1 an
 * AArch32 level and returns into the zImage in SVC mode with the registers
 * of the ARM boot protocol (Documentation/arch/arm/booting.rst): r0 = 0,
 * r1 = ~0 (no machine number: the device tree says), r2 = the device tree.
 *
 * One difference from the firmware: its armstub enters the kernel in HYP
 * mode; an exception return from AArch64 EL2 cannot reach AArch32 EL2, so the
 * kernel starts in SVC and runs without its hypervisor stub (no KVM, which a
 * boot test does not use).
 *
 * The other cores: QEMU parks them at EL2 on the spin table at 0xd8 (8 bytes
 * per core), but a 32-bit kernel releases them the way the firmware's
 * armstub7 expects (bcm2836-smp, arch/arm/mach-bcm/platsmp.c): it writes its
 * secondary entry to the core's ARM-local mailbox 3 (base + 0x8c + 16 *
 * core; the base is 0xff800000 on the BCM2711, 0x40000000 on the BCM2837)
 * and sends an event.  So the boot core copies a
 * small loop into the first page -- which the device tree keeps from the
 * kernel (/memreserve/ 0x0 0x1000 in bcm283x.dtsi) and where QEMU's own
 * parking code ends before 0x400 -- and points the spin table at it: each
 * core makes its EL1 AArch32, waits for its mailbox (read-to-clear at 0xcc +
 * 16 * core), clears it and enters the kernel there in SVC mode.
 *
 * Built with `aarch64-linux-gnu-gcc -nostdlib -Wl,--oformat=binary`: the
 * output is exactly 32 KiB (the .balign below), the zImage is appended, and
 * the stub finds it with a PC-relative address, wherever QEMU loads it.
 */
	.text
	.globl	_start
_start:
	mov	x19, x0			/* the device tree from QEMU's loader */
	mrs	x1, CurrentEL
	cmp	x1, #(2 << 2)
	b.ne	park			/* only entry at EL2 is handled (QEMU's raspi machines) */
	bl	el1_aarch32

	/* the other cores: the mailbox loop into the first page, then release them */
	adr	x1, keep
	adr	x2, keep_end
	mov	x3, #KEEP_AT
1:	ldr	w4, [x1], #4
	str	w4, [x3], #4
	cmp	x1, x2
	b.lo	1b
	mov	x1, #(KEEP_AT + (secondary - keep))
	mov	x2, #0xd8		/* QEMU's spin table: one 8-byte entry per core */
	str	x1, [x2, #8]
	str	x1, [x2, #16]
	str	x1, [x2, #24]
	dsb	sy
	sev

	adr	x1, zimage
	mov	x0, #0			/* r0 = 0 */
	mov	w3, #0xffffffff
	mov	x2, x19			/* r2 = the device tree */
	b	enter

park:	wfe
	b	park

/* Copied to KEEP_AT, so position-independent: it runs there on the other
 * cores after the kernel has reused the memory this stub was loaded into. */
	.set	KEEP_AT, 0x800
	.balign	4
keep:
/* EL1 becomes AArch32, as the firmware leaves it for a 32-bit kernel. */
el1_aarch32:
	msr	hcr_el2, xzr		/* RW = 0: EL1 is AArch32; no traps, no stage 2 */
	msr	hstr_el2, xzr		/* no CP15 register traps */
	mov	x4, #0x33ff		/* CPTR_EL2: its RES1 bits, FP/SIMD not trapped */
	msr	cptr_el2, x4
	mov	x4, #3			/* CNTHCTL_EL2: EL1 may read the counter and use the physical timer */
	msr	cnthctl_el2, x4
	msr	cntvoff_el2, xzr
	mrs	x4, midr_el1		/* EL1 reads its MIDR/MPIDR through these */
	msr	vpidr_el2, x4
	mrs	x4, mpidr_el1
	msr	vmpidr_el2, x4
	ret

/* A core other than the boot core: wait for the kernel's mailbox write. */
secondary:
	bl	el1_aarch32
	mrs	x4, mpidr_el1
	and	x4, x4, #3
	mrs	x5, midr_el1		/* the SoC by its cores: */
	ubfx	x5, x5, #4, #12
	cmp	x5, #0xd08		/* Cortex-A72: raspi4b's BCM2711, ARM-local at 0xff800000 */
	mov	x5, #0x00cc		/* mailbox 3 read-to-clear of core 0 */
	movk	x5, #0xff80, lsl #16
	b.eq	3f
	movk	x5, #0x4000, lsl #16	/* Cortex-A53: raspi3b/3ap's BCM2837, at 0x40000000 */
3:	add	x5, x5, x4, lsl #4
2:	wfe
	ldr	w1, [x5]
	cbz	w1, 2b
	str	w1, [x5]		/* writing the bits clears them */
	mov	x0, #0
	mov	x2, #0
	mov	x3, #0
/* Return into AArch32 SVC mode at x1 (A/I/F masked), r0-r2 from x0, x3, x2. */
enter:
	mov	x4, #0x1d3
	msr	spsr_el2, x4
	msr	elr_el2, x1
	mov	x1, x3
	eret
keep_end:

	.balign	32768
zimage:
