/* Entry of both programs. Runs wherever it was loaded (kflash.py puts any stub at
 * 0x80000000); if that is not the link address, copy the image there and jump.
 * Header (offsets from the image start, read and patched by the host):
 *   0  j over the header        4  magic "KFPY"
 *   8  u32 parameter (bootstrap: baud rate to switch to)
 * SPDX-License-Identifier: MIT
 */
    .section .text.start, "ax"
    .globl _start
    .option push
    .option norvc
_start:
    j       1f
    .word   0x5950464B
    .word   115200
    .word   0
    .option pop                     /* compressed instructions from here on */
1:
    csrw    mie, zero
    csrci   mstatus, 8
    mv      s0, a0
    mv      s1, a1
#ifndef KFPY_BOOTSTRAP                /* the bootstrap is always loaded at its link address */
    lla     t0, _start              /* where we run now */
    li      t1, LINK_BASE           /* where we were linked */
    beq     t0, t1, 3f
    lla     t2, _image_end
    sub     t2, t2, t0              /* image size, a multiple of 8 */
    mv      t3, t0
    mv      t4, t1
2:
    ld      t5, 0(t3)
    sd      t5, 0(t4)
    addi    t3, t3, 8
    addi    t4, t4, 8
    addi    t2, t2, -8
    bnez    t2, 2b
    fence.i
    lla     t2, 3f
    sub     t2, t2, t0
    add     t2, t2, t1
    jr      t2
3:
#endif
    lla     sp, _stack_top
    lla     t0, _bss_start
    lla     t1, _bss_end
4:
    bgeu    t0, t1, 5f
    sd      zero, 0(t0)
    addi    t0, t0, 8
    j       4b
5:
    mv      a0, s0
    mv      a1, s1
    call    main
6:
    j       6b
