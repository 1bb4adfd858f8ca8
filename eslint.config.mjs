// ESLint flat config: @eslint/js recommended + typescript-eslint recommended (syntax only, no type information, so it stays fast).
// Layout is Prettier's job (.prettierrc.json); no rule here checks it.
import js from '@eslint/js';
import { defineConfig, globalIgnores } from 'eslint/config';
import tseslint from 'typescript-eslint';

export default defineConfig(
  // Only the project's own TS/JS sources (src/, test/, bench/, examples/, datasets/*.ts, launch/*.js|*.ts); as .prettierignore.
  globalIgnores([
    'node_modules/',
    'dist/',
    'build/',
    'runs/',
    'test-artifacts/',
    'binding/',
    'models/',
    'docs/',
    'bench/out/',
    'datasets/*/',
  ]),
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
    },
  },
  {
    // launch/*.js: the bin entry points, CommonJS scripts that require() the compiled dist/.
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: {
      sourceType: 'commonjs',
      globals: { process: 'readonly', console: 'readonly', __dirname: 'readonly', __filename: 'readonly' },
    },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
