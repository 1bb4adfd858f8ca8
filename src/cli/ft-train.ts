// ft-train: what every rank runs under `mpirun --with-ft ulfm` (launch/ft-run): the command line
// over the library's train (src/api/train.ts), which checks, trains and writes the results.
import { hideBin } from 'yargs/helpers';
import { exitWhenDone, InputError, runTraining } from '../api/train';
import { parseTrainOptions } from './train-flags';

export function run(): void {
  exitWhenDone(
    (async () => {
      let options;
      try {
        options = parseTrainOptions(hideBin(process.argv));
      } catch (error) {
        throw new InputError((error as Error).message, true);
      }
      return runTraining(options);
    })(),
  );
}
