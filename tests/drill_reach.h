/*
 * drill_reach.h — what a fault in each halting sentinel slot 0–35 may fire
 * beyond its own slot: the downstream slots its value can reach within the
 * step (the reserved 29 and 31 aside). Shared by the CPU drills
 * (test_drills.c) and the GPU's (test_cuda_drills.c), whose nets compute
 * the same data flow.
 */
#ifndef FOX_TESTS_DRILL_REACH_H
#define FOX_TESTS_DRILL_REACH_H

#include <stdint.h>

#define S(i) (1ull << (i))
/* The trunk below h_s2: a poisoned sample reaches GRN2's stages, h_s2 (12 inline, 49 before
 * Mech 10 sanitizes it), the trunk's weight gradients and d_states. */
#define TRUNK_DOWN (S(6) | S(12) | S(16) | S(17) | S(18) | S(19) | S(20) | S(32) | S(49))
/* A poisoned C51 log-probability reaches the loss, TD errors, priorities, the C51 backward and
 * every later d_h_s2 point; the Phase C guard after 35 keeps it out of the trunk. */
#define C51_DOWN (S(6) | S(7) | S(11) | S(21) | S(23) | S(24) | S(25) | S(33) | S(34) | S(35))
#define IQN_DOWN (S(6) | S(21) | S(26) | S(27) | S(28) | S(35))

typedef struct reach {
    int slot;
    uint64_t down; /* the slots its value can reach, beyond itself */
} reach;

static const reach reaches[] = {
    {0, S(13) | TRUNK_DOWN},
    {1, C51_DOWN},
    {2, C51_DOWN},
    {3, S(21)},
    {4, S(5) | S(8) | S(10) | S(46) | C51_DOWN},
    {5, S(8) | C51_DOWN},
    {6, 0},
    {7, C51_DOWN},
    {8, C51_DOWN},
    {9, IQN_DOWN},
    {10, S(46)}, /* Mech 1's clip sanitizes the IQN targets */
    {11, S(23)},
    {12, S(49)},
    {13, TRUNK_DOWN},
    {14, S(44)},
    {15, S(46)},
    {16, TRUNK_DOWN},
    {17, TRUNK_DOWN},
    {18, TRUNK_DOWN},
    {19, TRUNK_DOWN},
    {20, TRUNK_DOWN},
    {21, 0},
    {22, 0},
    {23, 0},
    {24, S(6) | S(33) | S(34) | S(35)},
    {25, S(6) | S(33) | S(34) | S(35)},
    {26, S(6) | S(27) | S(35)},
    {27, S(35)},
    {28, IQN_DOWN},
    {30, S(6) | S(34) | S(35)},
    {32, 0},
    {33, S(34) | S(35)},
    {34, S(35)},
    {35, 0},
};

#endif
