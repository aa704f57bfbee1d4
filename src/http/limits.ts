export const MIB = 1024 * 1024
