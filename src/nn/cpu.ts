// The CPU backend: oneDNN and OpenBLAS kernels in the addon.
import { addonPart } from '../base/addon';
import type { Backend } from './backend';

export const cpu: Backend = addonPart<{ cpu: Backend }>().cpu;
