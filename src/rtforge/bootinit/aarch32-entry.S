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
 * boot test does not use).  Only the boot CPU is started: the others stay
 * parked by QEMU in AArch64, where the 32-bit kernel's mailbox release
 * (bcm2836-smp) cannot reach them, so it reports them failing to come online.
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

	msr	hcr_el2, xzr		/* RW = 0: EL1 is AArch32; no traps, no stage 2 */
	msr	hstr_el2, xzr		/* no CP15 register traps */
	mov	x1, #0x33ff		/* CPTR_EL2: its RES1 bits, FP/SIMD not trapped */
	msr	cptr_el2, x1
	mov	x1, #3			/* CNTHCTL_EL2: EL1 may read the counter and use the physical timer */
	msr	cnthctl_el2, x1
	msr	cntvoff_el2, xzr
	mrs	x1, midr_el1		/* EL1 reads its MIDR/MPIDR through these */
	msr	vpidr_el2, x1
	mrs	x1, mpidr_el1
	msr	vmpidr_el2, x1

	mov	x1, #0x1d3		/* SPSR_EL2: AArch32, SVC mode, A/I/F masked */
	msr	spsr_el2, x1
	adr	x1, zimage
	msr	elr_el2, x1
	mov	x0, #0			/* r0 = 0 */
	mov	w1, #0xffffffff		/* r1 = ~0 */
	mov	x2, x19			/* r2 = the device tree */
	eret

park:	wfe
	b	park

	.balign	32768
zimage:
