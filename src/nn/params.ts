// Parameters in one flat Float32Array and gradients in another (llm.c style): one collective
// covers them all; layers take views at each use, so that the gradients can be placed elsewhere.
// Layers reserve their tensors first, then the buffers exist.
import { Stream, streamVector } from './stream-memory';

export interface ParamView {
  /** e.g. "conv1.weight" */
  name: string;
  offset: number;
  length: number;
  /** The tensor's shape, e.g. [out, in, kh, kw]. */
  shape: number[];
}

export class ParameterStore {
  readonly views: ParamView[] = [];
  private size = 0;
  private withTail?: Float32Array;
  private params?: Float32Array;
  private grads?: Float32Array;

  /** Reserves a tensor; its memory exists once allocate() has run. */
  reserve(name: string, shape: number[]): ParamView {
    if (this.params) throw new Error(`reserve ${name}: the parameter buffer is already allocated`);
    const view = { name, offset: this.size, length: shape.reduce((a, b) => a * b, 1), shape };
    this.views.push(view);
    this.size += view.length;
    return view;
  }

  /** `memory` makes the buffers' memory (default: plain typed arrays; a GPU's net: page-locked ones). */
  allocate(memory?: (length: number) => Float32Array): void {
    this.grads = streamVector(this.size, Stream.gradients, memory); // first: a size too large is refused naming the parameter count
    this.withTail = streamVector(this.size + 1, Stream.parameters, memory);
    this.params = this.withTail.subarray(0, this.size);
  }

  /**
   * The parameters followed by one more float: sharded optimizer state allgathers the updated
   * parameters into it with the step's summed loss as the last element (see sharding/sharded-state.ts).
   */
  get dataWithTail(): Float32Array {
    if (!this.withTail) throw new Error('the parameter buffer is not allocated yet');
    return this.withTail;
  }

  /** All parameters, in reservation order. */
  get data(): Float32Array {
    if (!this.params) throw new Error('the parameter buffer is not allocated yet');
    return this.params;
  }

  /** All gradients, laid out like data. */
  get gradients(): Float32Array {
    if (!this.grads) throw new Error('the parameter buffer is not allocated yet');
    return this.grads;
  }

  /**
   * Where the layers write gradients from now on: `into`, exactly as long as the parameters (e.g.
   * a slot of the shard-ordered sum, so that no copy follows).
   */
  placeGradients(into: Float32Array): void {
    if (into.length !== this.size) throw new RangeError(`placeGradients: expected ${this.size} floats, got ${into.length}`);
    this.grads = into;
  }

  param(view: ParamView): Float32Array {
    return this.data.subarray(view.offset, view.offset + view.length);
  }

  grad(view: ParamView): Float32Array {
    return this.gradients.subarray(view.offset, view.offset + view.length);
  }
}
