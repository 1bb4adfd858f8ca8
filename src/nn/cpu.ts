// The CPU backend: oneDNN and OpenBLAS kernels in the addon.
import { addon } from '../base/addon';
import type { Backend } from './backend';

export const cpu: Backend = addon.cpu;
